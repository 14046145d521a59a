# Replay measurements moved to process memory (runs/measurements.py, prometheus_client): a replay is
# a read and must not write, and the table was upserted by every replay, GETs included. Nothing
# reads or writes reckon_replay_metric any more, so it is dropped rather than left behind. Its
# figures are lost on upgrade; they were counters a Prometheus scrape treats like a process restart.
# Reversing recreates the empty table.

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('runs', '0006_run_tenant'),
    ]

    operations = [
        migrations.DeleteModel(
            name='ReplayMetric',
        ),
    ]
