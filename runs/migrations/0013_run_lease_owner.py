from django.db import migrations, models

# One statement both engines run in place: PostgreSQL adds a column with a constant default without
# rewriting the table, and SQLite without rebuilding it (a rebuild would have to drop and recreate
# the views that read reckon_run, such as reckon_in_flight_call).
ADD = "ALTER TABLE reckon_run ADD COLUMN lease_owner varchar(200) DEFAULT '' NOT NULL"
DROP = "ALTER TABLE reckon_run DROP COLUMN lease_owner"


class Migration(migrations.Migration):
    """The lease's owner (runs.leases): who acquired the current epoch. A lease taken before this
    migration has no owner (""), as Reckon's own leases have: no API caller may renew, release or
    append under it; its agent takes the run again once it expires (RECKON_LEASE_SECONDS)."""

    dependencies = [("runs", "0012_run_payload_bytes")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunSQL(ADD, DROP)],
            state_operations=[
                migrations.AddField(
                    model_name="run",
                    name="lease_owner",
                    field=models.CharField(blank=True, db_default="", default="", max_length=200),
                ),
            ],
        ),
    ]
