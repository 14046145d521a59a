# ApiToken moves here from the console app: the table (reckon_api_token) stays as it is; only
# Django's state and the content types move. The console's permissions (the roles' grants) move
# from the content type console.console to access.access, so every group and user keeps its role.

import django.db.models.deletion
import django.db.models.functions.datetime
from django.conf import settings
from django.db import migrations, models

from runs.migration_moves import moves

forward, backward = moves(
    (("console", "apitoken"), ("access", "apitoken")),
    (("console", "console"), ("access", "access")),
)


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("console", "0002_backfill_run_tenants"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("auth", "0012_alter_user_first_name_max_length"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="ApiToken",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                        ("name", models.CharField(help_text="who or what uses it, e.g. 'billing-agent prod'", max_length=200)),
                        ("prefix", models.CharField(help_text="the first characters of the secret, to recognise it", max_length=16)),
                        ("secret_sha256", models.CharField(max_length=64, unique=True)),
                        ("scopes", models.JSONField(default=list, help_text="any of append, read, decide")),
                        ("tenants", models.JSONField(blank=True, default=list, help_text="tenants it may touch; empty means all")),
                        ("created_at", models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                        ("revoked_at", models.DateTimeField(blank=True, null=True)),
                        ("last_used_at", models.DateTimeField(blank=True, null=True)),
                        ("created_by", models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name="+", to=settings.AUTH_USER_MODEL)),
                    ],
                    options={"db_table": "reckon_api_token", "ordering": ["-created_at", "-id"]},
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(forward, backward),
    ]
