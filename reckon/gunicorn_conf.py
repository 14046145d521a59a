"""gunicorn settings for Reckon: ``gunicorn -c python:reckon.gunicorn_conf reckon.wsgi:application``.

The Procfile's web process starts it so. Its sizing comes from the environment, read by the
strict helpers (a value they cannot use stops start-up naming the variable); a command-line flag
or ``GUNICORN_CMD_ARGS`` still wins, as gunicorn's own order has it. docs/operations.md sizes them.

WEB_BIND                127.0.0.1:8000 (a buffering proxy in front, deploy/nginx/reckon.conf: bind there; "0.0.0.0:8000" in a container)
WEB_WORKERS             2 per core: each worker is one process holding its own database connections
WEB_THREADS             4 per worker: requests mostly wait on PostgreSQL, so threads overlap them
WEB_TIMEOUT_S           30: a worker silent this long is killed and replaced
WEB_GRACEFUL_TIMEOUT_S  20: on SIGTERM, requests in flight get this long to finish
WEB_ACCESS_LOG          unset: no access log; "-" for stdout. /healthz and /readyz are never logged.

gunicorn is not meant to face clients: each connection holds one of WEB_WORKERS x WEB_THREADS
threads, so a few dozen slow clients would hold them all. The proxy in front reads requests whole
and times slow clients out (docs/operations.md, "The proxy in front"; tests/test_proxy.py).

The hooks are those of prometheus_client's multiprocess mode (runs/metrics_dir.py).
"""

from __future__ import annotations

import os

from gunicorn.glogging import Logger

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reckon.settings")

from reckon.env import envint, envstr  # after the settings module is named

bind = [envstr("WEB_BIND", "127.0.0.1:8000")]
workers = envint("WEB_WORKERS", 2 * (os.cpu_count() or 1), minimum=1)
threads = envint("WEB_THREADS", 4, minimum=1)
timeout = envint("WEB_TIMEOUT_S", 30, minimum=1)
graceful_timeout = envint("WEB_GRACEFUL_TIMEOUT_S", 20, minimum=1)
accesslog = envstr("WEB_ACCESS_LOG") or None

_PROBES = ("/healthz", "/readyz")


class QuietProbesLogger(Logger):
    """gunicorn's logger without access lines for the health probes, which a load balancer or
    systemd sends every few seconds: they would drown the requests people look for."""

    def access(self, resp, req, environ, request_time):
        if environ.get("PATH_INFO") in _PROBES:
            return
        super().access(resp, req, environ, request_time)


logger_class = QuietProbesLogger


def on_starting(server) -> None:
    """In the master, before any worker starts: drop the metric files of processes gone since the
    last start, so the merged figures begin again from this deployment's processes."""
    from runs.metrics_dir import multiproc_dir_clean

    multiproc_dir_clean()


def child_exit(server, worker) -> None:
    from runs.metrics_dir import worker_exited

    worker_exited(worker.pid)
