"""The run row keeps the bytes of its payloads (``Run.payload_bytes``), for the run size limit.

Existing runs are counted once here, from their stored payloads' text: one pass over the event
table, grouped by run, like chain v3's migration does (docs/operations.md: web, worker and beat stopped).
"""

from django.db import migrations, models

_COUNT = {
    # The json column holds the text exactly as the store wrote it.
    "postgresql": "UPDATE reckon_run r SET payload_bytes = s.n FROM (SELECT run_id, sum(octet_length(payload::text)) AS n FROM reckon_event GROUP BY run_id) s WHERE r.run_id = s.run_id",
    "sqlite": "UPDATE reckon_run SET payload_bytes = COALESCE((SELECT sum(length(CAST(payload AS BLOB))) FROM reckon_event e WHERE e.run_id = reckon_run.run_id), 0)",
}


def count(apps, schema_editor):
    sql = _COUNT.get(schema_editor.connection.vendor)
    if sql:
        schema_editor.execute(sql)


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0011_chain_v3"),
    ]

    operations = [
        # The column as one ALTER on both engines: Django's AddField of a NOT NULL column on SQLite
        # rebuilds the table, which the in-flight calls' view (recovery) reads and so forbids. With
        # a constant default, neither engine rewrites the table's rows.
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    "ALTER TABLE reckon_run ADD COLUMN payload_bytes bigint NOT NULL DEFAULT 0",
                    "ALTER TABLE reckon_run DROP COLUMN payload_bytes",
                ),
            ],
            state_operations=[
                migrations.AddField(
                    model_name="run",
                    name="payload_bytes",
                    field=models.BigIntegerField(db_default=0, default=0, editable=False),
                ),
            ],
        ),
        migrations.RunPython(count, migrations.RunPython.noop),
    ]
