# The reports (docs/reports.md): the view_reports permission, granted to the manager group where
# one exists (roles_ensure grants it too, as it does every role's permissions), and the API's
# "reports" token scope.

from django.db import migrations, models


def _grant(apps, schema_editor):
    ContentType = apps.get_model("contenttypes", "ContentType")
    Permission = apps.get_model("auth", "Permission")
    Group = apps.get_model("auth", "Group")
    ct, _ = ContentType.objects.get_or_create(app_label="access", model="access")
    p, _ = Permission.objects.get_or_create(
        content_type=ct, codename="view_reports", defaults={"name": "Can read the reports (trends, resolution times, deadlines) and export them"}
    )
    for group in Group.objects.filter(name="manager"):
        group.permissions.add(p)


class Migration(migrations.Migration):

    dependencies = [
        ("access", "0008_access_record_identity"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        migrations.AlterField(model_name="apitoken", name="scopes", field=models.JSONField(default=list, help_text="any of append, read, decide, reports")),
        migrations.RunPython(_grant, migrations.RunPython.noop),
    ]
