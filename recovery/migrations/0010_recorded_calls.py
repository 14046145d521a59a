# The reports' roll-up of recorded tool calls per run, UTC day, tool and tenant (recovery.recorded,
# docs/reports.md), so that a report no longer scans the period's events. Filled here from the log
# by the roll-up's own rule (the one `manage.py rebuild_projections` runs), so that the reports of
# an upgraded installation count the calls recorded before it.

from django.db import migrations, models


def _fill(apps, schema_editor):
    from recovery.recorded import recorded_rebuild

    recorded_rebuild()


class Migration(migrations.Migration):

    # The log at its current layout: the roll-up is filled from it through the current models.
    dependencies = [("recovery", "0009_first_touch_at"), ("runs", "0015_drop_reckon_chain")]

    operations = [
        migrations.CreateModel(
            name="RecordedCalls",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("run_id", models.CharField(max_length=200)),
                ("day", models.DateField()),
                ("tool", models.CharField(max_length=200)),
                ("tenant", models.CharField(max_length=200)),
                ("calls", models.BigIntegerField()),
            ],
            options={
                "db_table": "reckon_recorded_calls",
                "indexes": [models.Index(fields=["day", "tool", "tenant"], name="reckon_recorded_calls_day")],
                "constraints": [models.UniqueConstraint(fields=("run_id", "day", "tool", "tenant"), name="reckon_recorded_calls_key")],
            },
        ),
        migrations.RunPython(_fill, migrations.RunPython.noop),
    ]
