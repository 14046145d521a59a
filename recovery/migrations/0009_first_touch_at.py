# The first time a person acted on a call (claimed, assigned, released, noted or decided it), for
# the reports' time to first human touch (docs/reports.md). Existing rows are filled from what the
# row still knows (the current claim, a person's resolution); `manage.py rebuild_projections`
# derives the exact value from the log, as it does every column.

from django.db import migrations, models
from django.db.models import F, Q
from django.db.models.functions import Least


def _backfill(apps, schema_editor):
    Call = apps.get_model("recovery", "UncertainCall")
    person = Q(resolution_kind="person", resolved_at__isnull=False)
    Call.objects.filter(claimed_at__isnull=False).exclude(person).update(first_touch_at=F("claimed_at"))
    Call.objects.filter(person, claimed_at__isnull=True).update(first_touch_at=F("resolved_at"))
    Call.objects.filter(person, claimed_at__isnull=False).update(first_touch_at=Least("claimed_at", "resolved_at"))


class Migration(migrations.Migration):

    dependencies = [("recovery", "0008_in_flight_on_the_run_row")]

    operations = [
        migrations.AddField(model_name="uncertaincall", name="first_touch_at", field=models.DateTimeField(blank=True, null=True)),
        migrations.RunPython(_backfill, migrations.RunPython.noop),
    ]
