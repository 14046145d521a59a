"""gunicorn settings for Reckon: ``gunicorn -c python:reckon.gunicorn_conf reckon.wsgi``.

Only the hooks of prometheus_client's multiprocess mode (runs/metrics_dir.py); every other option
(bind, workers, threads) comes from the command line or ``GUNICORN_CMD_ARGS`` as usual.
"""

from __future__ import annotations

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reckon.settings")


def on_starting(server) -> None:
    """In the master, before any worker starts: drop the metric files of processes gone since the
    last start, so the merged figures begin again from this deployment's processes."""
    from runs.metrics_dir import multiproc_dir_clean

    multiproc_dir_clean()


def child_exit(server, worker) -> None:
    from runs.metrics_dir import worker_exited

    worker_exited(worker.pid)
