from django.db import migrations


def backfill(apps, schema_editor):
    # Runs written before the tenant projector existed: derive their tenants from the log once.
    from runs.tenants import run_tenants_rebuild

    run_tenants_rebuild()


class Migration(migrations.Migration):
    dependencies = [
        ("console", "0001_initial"),
        ("runs", "0002_append_only_trigger"),
    ]

    operations = [migrations.RunPython(backfill, migrations.RunPython.noop)]
