# The queue table's indexes that no statement of the console, the API, /metrics or the worker uses
# (the plans are in docs/recovery.md, "The queue table's indexes"; ``manage.py bench console``
# prints them). Each one cost every insert and most updates of a row.
#
# The two field changes only drop their indexes: done as plain DROP INDEX statements so that
# PostgreSQL keeps the claimed_by foreign key as it is (Django's AlterField would drop and re-add it,
# checking every row again) and SQLite does not rebuild the table.

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

FIELD_INDEXES = [
    # (name, columns, PostgreSQL only)
    ("reckon_uncertain_call_claimed_by_id_ffed19b8", "claimed_by_id", False),
    ("reckon_uncertain_call_idempotency_key_41cd4d0e", "idempotency_key", False),
    ("reckon_uncertain_call_idempotency_key_41cd4d0e_like", "idempotency_key varchar_pattern_ops", True),
]


def _indexes_drop(apps, schema_editor):
    for name, _columns, _pg_only in FIELD_INDEXES:
        schema_editor.execute(f'DROP INDEX IF EXISTS "{name}"')


def _indexes_create(apps, schema_editor):
    for name, columns, pg_only in FIELD_INDEXES:
        if pg_only and schema_editor.connection.vendor != "postgresql":
            continue
        schema_editor.execute(f'CREATE INDEX IF NOT EXISTS "{name}" ON "reckon_uncertain_call" ({columns})')


class Migration(migrations.Migration):
    dependencies = [
        ("recovery", "0004_in_flight_calls"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RemoveIndex(model_name="uncertaincall", name="reckon_uc_deadline"),
        migrations.RemoveIndex(model_name="uncertaincall", name="reckon_uc_settled"),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="uncertaincall",
                    name="claimed_by",
                    field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name="+", to=settings.AUTH_USER_MODEL),
                ),
                migrations.AlterField(model_name="uncertaincall", name="idempotency_key", field=models.CharField(max_length=200)),
            ],
            database_operations=[migrations.RunPython(_indexes_drop, _indexes_create)],
        ),
    ]
