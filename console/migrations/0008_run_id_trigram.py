# The site search finds a run by any part of its id (console/search.py, _runs_matching), as the runs
# page does: on PostgreSQL a pg_trgm GIN index of UPPER(run_id), the expression search.contains
# writes, so a fragment such as "c804" is found without reading every run. SQLite scans.

from django.db import migrations

NAME = "reckon_run_search_id_trgm"


def _create(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    schema_editor.execute(f'CREATE INDEX IF NOT EXISTS "{NAME}" ON "reckon_run" USING gin (UPPER(run_id) gin_trgm_ops)')


def _drop(apps, schema_editor):
    schema_editor.execute(f'DROP INDEX IF EXISTS "{NAME}"')


class Migration(migrations.Migration):
    dependencies = [("console", "0007_decision_form_use")]

    operations = [migrations.RunPython(_create, _drop)]
