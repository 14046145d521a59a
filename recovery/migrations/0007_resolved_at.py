# A resolved call's end is the timestamp of the event that resolved it (resolved_at), no longer its
# row's last change (updated_at): a run imported today whose calls were settled months ago was not
# open today. Existing rows are filled from their resolving event's ts, in one statement.

from django.conf import settings
from django.db import migrations, models
from django.db.models import OuterRef, Subquery


def _backfill(apps, schema_editor):
    Call = apps.get_model("recovery", "UncertainCall")
    Event = apps.get_model("runs", "Event")
    ts = Event.objects.filter(run_id=OuterRef("run_id"), seq=OuterRef("resolved_seq")).values("ts")[:1]
    Call.objects.filter(state="resolved", resolved_seq__isnull=False).update(resolved_at=Subquery(ts))


class Migration(migrations.Migration):

    dependencies = [
        ("recovery", "0006_tool_policy_fresh_for"),
        ("runs", "0008_chain"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RemoveIndex(model_name="uncertaincall", name="reckon_uc_settled_at"),
        migrations.AddField(model_name="uncertaincall", name="resolved_at", field=models.DateTimeField(blank=True, null=True)),
        migrations.RunPython(_backfill, migrations.RunPython.noop),
        migrations.AddIndex(
            model_name="uncertaincall",
            index=models.Index(condition=models.Q(("state", "resolved")), fields=["resolved_at"], name="reckon_uc_resolved_at"),
        ),
    ]
