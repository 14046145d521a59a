# The console keeps no tables of its own: its three models moved (state only, tables kept) to
# access (ApiToken), api (IdempotencyRecord) and runs (RunTenant).

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("console", "0002_backfill_run_tenants"),
        ("access", "0001_initial"),
        ("api", "0001_initial"),
        ("runs", "0006_run_tenant"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(name="ApiToken"),
                migrations.DeleteModel(name="IdempotencyRecord"),
                migrations.DeleteModel(name="RunTenant"),
            ],
            database_operations=[],
        ),
    ]
