# The chain is linked by the appending process alone (runs/store_pg.py, runs.verify's link), so the
# database computes no hash: the batch append's PL/pgSQL reckon_chain() of 0008 goes. No trigger
# or other function uses it. Reversing creates it again, as 0008 did.

from importlib import import_module

from django.db import migrations


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("DROP FUNCTION IF EXISTS reckon_chain(bytea, bytea[])", params=None)


def create(apps, schema_editor):
    import_module("runs.migrations.0008_chain").chain_fn(apps, schema_editor)


class Migration(migrations.Migration):
    dependencies = [("runs", "0014_run_import")]

    operations = [migrations.RunPython(drop, create)]
