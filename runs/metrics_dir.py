"""Start-up care of the Prometheus multiprocess folder (``settings.PROMETHEUS_MULTIPROC_DIR``).

prometheus_client's multiprocess mode keeps each process's figures in files named after its pid
(``summary_1234.db``, ``gauge_max_1234.db``, ...) and /metrics adds them all up. The client's
documentation asks for the folder to be wiped between runs, before start-up. Reckon's processes on
one host share the folder (gunicorn workers, a Celery worker started before or after them), so a
whole wipe by one of them would hide a running sibling's figures; ``multiproc_dir_clean`` removes
the files of processes that no longer run, which at the start of a whole deployment is every file.

It lives beside ``runs.measurements`` and imports neither Django models nor prometheus_client, so a
gunicorn master can call it before it loads the application. Called at start-up only, never from
settings (every worker loads the settings):
- gunicorn: ``gunicorn -c python:reckon.gunicorn_conf reckon.wsgi`` (``on_starting``, and
  ``child_exit`` for a worker that dies);
- Celery: the ``worker_init`` signal (reckon/celery.py);
- ``manage.py demo`` before it serves.
"""

from __future__ import annotations

import glob
import os
import re

_PID = re.compile(r"_(\d+)\.db$")


def _running(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def multiproc_dir() -> str:
    from django.conf import settings

    return getattr(settings, "PROMETHEUS_MULTIPROC_DIR", "") or ""


def multiproc_dir_clean(path: str | None = None) -> list[str]:
    """Remove the metric files of processes that are no longer running; the removed paths.

    Their counters leave the merged totals, which a Prometheus server reads as a counter reset, as
    it would after a restart. Nothing happens when multiprocess mode is off.
    """
    path = multiproc_dir() if path is None else path
    if not path:
        return []
    removed = []
    for name in glob.glob(os.path.join(path, "*.db")):
        match = _PID.search(os.path.basename(name))
        if match and not _running(int(match.group(1))):
            try:
                os.remove(name)
                removed.append(name)
            except FileNotFoundError:  # a sibling cleaning at the same moment
                pass
    return removed


def worker_exited(pid: int) -> None:
    """A gunicorn worker died: drop its live gauges (Reckon has none today; the client asks for it)."""
    path = multiproc_dir()
    if path:
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid, path)
