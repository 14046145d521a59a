from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0009_event_seal"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="in_flight",
            field=models.JSONField(blank=True, editable=False, null=True),
        ),
    ]
