"""The Celery application. Configuration lives in Django settings under the CELERY_ prefix."""

import os

from celery import Celery
from celery.signals import worker_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reckon.settings")

app = Celery("reckon")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_init.connect
def _metrics_dir_clean(**kwargs) -> None:
    """A worker starting drops the metric files of processes gone since (runs/metrics_dir.py)."""
    from runs.metrics_dir import multiproc_dir_clean

    multiproc_dir_clean()
