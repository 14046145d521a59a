from django.db import migrations, models
import django.db.models.functions.datetime


def imports_from_lease_records(apps, schema_editor):
    """Every import so far took the run's lease as ``reckon-import`` (runs.importer.IMPORT_HOLDER),
    and the lease record keeps each acquisition: those epochs are the imports'."""
    LeaseRecord = apps.get_model("runs", "LeaseRecord")
    RunImport = apps.get_model("runs", "RunImport")
    Run = apps.get_model("runs", "Run")
    sources = dict(Run.objects.filter(origin="import").values_list("run_id", "source_file"))
    rows = LeaseRecord.objects.filter(holder="reckon-import", kind__in=("acquired", "takeover")).values_list("run_id", "epoch").distinct()
    RunImport.objects.bulk_create([RunImport(run_id=r, epoch=e, source_file=sources.get(r, "")[:500]) for r, e in rows], ignore_conflicts=True, batch_size=1000)


class Migration(migrations.Migration):
    dependencies = [("runs", "0013_run_lease_owner")]

    operations = [
        migrations.CreateModel(
            name="RunImport",
            fields=[
                ("pk", models.CompositePrimaryKey("run_id", "epoch", blank=True, editable=False, primary_key=True, serialize=False)),
                ("run_id", models.CharField(max_length=200)),
                ("epoch", models.BigIntegerField()),
                ("source_file", models.CharField(blank=True, default="", max_length=500)),
                ("at", models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
            ],
            options={"db_table": "reckon_run_import"},
        ),
        migrations.RunPython(imports_from_lease_records, migrations.RunPython.noop),
    ]
