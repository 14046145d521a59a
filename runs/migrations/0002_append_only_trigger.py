"""On PostgreSQL, the events table rejects UPDATE and DELETE: append-only is enforced by the database,
not only by the code paths that happen to exist today. TRUNCATE (used by test isolation and by an
operator deliberately discarding a database) is not affected."""

from django.db import migrations

FORWARD = """
CREATE OR REPLACE FUNCTION reckon_event_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'reckon_event is append-only: % is not allowed', TG_OP
        USING ERRCODE = 'restrict_violation';
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER reckon_event_append_only
    BEFORE UPDATE OR DELETE ON reckon_event
    FOR EACH ROW EXECUTE FUNCTION reckon_event_append_only();
"""

BACKWARD = """
DROP TRIGGER IF EXISTS reckon_event_append_only ON reckon_event;
DROP FUNCTION IF EXISTS reckon_event_append_only();
"""


def forward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(FORWARD, params=None)


def backward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(BACKWARD, params=None)


class Migration(migrations.Migration):
    dependencies = [("runs", "0001_initial")]
    operations = [migrations.RunPython(forward, backward)]
