# RunTenant (the tenants a run's events name) moves here from the console app, next to the store
# that keeps it: the table (reckon_run_tenant) stays; only Django's state and the content type move.

from django.db import migrations, models

from runs.migration_moves import moves

forward, backward = moves((("console", "runtenant"), ("runs", "runtenant")))


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0005_event_composite_key"),
        ("console", "0002_backfill_run_tenants"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("auth", "0012_alter_user_first_name_max_length"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="RunTenant",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                        ("run_id", models.CharField(max_length=200)),
                        ("tenant", models.CharField(max_length=200)),
                    ],
                    options={
                        "db_table": "reckon_run_tenant",
                        "indexes": [models.Index(fields=["tenant", "run_id"], name="reckon_run_tenant_by_tenant")],
                        "constraints": [models.UniqueConstraint(fields=("run_id", "tenant"), name="reckon_run_tenant_uniq")],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(forward, backward),
    ]
