# IdempotencyRecord moves here from the console app: the table (reckon_idempotency) stays; only
# Django's state and the content type move.

import django.db.models.functions.datetime
from django.db import migrations, models

from runs.migration_moves import moves

forward, backward = moves((("console", "idempotencyrecord"), ("api", "idempotencyrecord")))


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("console", "0002_backfill_run_tenants"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("auth", "0012_alter_user_first_name_max_length"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="IdempotencyRecord",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                        ("owner", models.CharField(help_text="token:<id> or user:<id>: keys are per sender", max_length=100)),
                        ("key", models.CharField(max_length=255)),
                        ("fingerprint", models.CharField(help_text="sha256 of method, path and body", max_length=64)),
                        ("status_code", models.PositiveSmallIntegerField(blank=True, help_text="null while the first request runs", null=True)),
                        ("response", models.JSONField(blank=True, null=True)),
                        ("created_at", models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                    ],
                    options={
                        "db_table": "reckon_idempotency",
                        "constraints": [models.UniqueConstraint(fields=("owner", "key"), name="reckon_idempotency_owner_key_uniq")],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(forward, backward),
    ]
