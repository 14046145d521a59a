# The reports' calls resolved after their deadline (the worst ten, the trend's overdue counts) are
# read from a partial index of the late ones, not by scanning every resolved call of the period.

from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('recovery', '0010_recorded_calls'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddIndex(
            model_name='uncertaincall',
            index=models.Index(condition=models.Q(('resolved_at__gt', models.F('deadline')), ('state', 'resolved')), fields=['deadline'], name='reckon_uc_resolved_late'),
        ),
    ]
