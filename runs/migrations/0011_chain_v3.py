# Chain v3 links each event by its canonical bytes, sha256(hash(n - 1) || canonical(event n)), from
# the v3 genesis (docs/evidence.md). Events already chained keep their hashes: each run chained
# before this migration records how many of its first events chain v2 linked (by their digests),
# and its later events are linked by v3. Runs not chained yet (awaiting chain_backfill) and runs
# with no events are chained by v3 from their start (NULL). A nullable column: SQLite adds it in
# place, without rebuilding the table under the views that read it.

from django.db import migrations, models

MARK_V2 = "UPDATE reckon_run SET chain_v2_upto = last_seq WHERE head IS NOT NULL AND last_seq > 0"


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0010_run_in_flight"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="chain_v2_upto",
            field=models.BigIntegerField(blank=True, editable=False, null=True),
        ),
        migrations.RunSQL(MARK_V2, reverse_sql=migrations.RunSQL.noop),
    ]
