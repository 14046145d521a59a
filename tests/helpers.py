"""Plain helpers shared by tests of more than one package: ``manage.py`` run in a real process
against a database of the test's own, the pattern of an SQL statement that writes, and a test's
own HTTP server served from a thread."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def serve_in_thread(server) -> threading.Thread:
    """``server.serve_forever()`` in a daemon thread, started. It looks for ``shutdown()`` every
    20 ms: at the default half second, every receiver a test stopped held its teardown about that
    long (some forty seconds of a run on each engine)."""
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    return thread


# A statement that changes the database, wherever it sits (a CTE can hide an INSERT behind WITH).
WRITE = re.compile(
    r"^\s*(INSERT|UPDATE|DELETE|CREATE|ALTER|DROP|TRUNCATE|REPLACE|MERGE)\b|\bINSERT\s+INTO\b|\bDELETE\s+FROM\b|\bUPDATE\s+\S+\s+SET\b",
    re.IGNORECASE,
)


def _manage(database_url: str, *args: str, stdin: str | None = None) -> str:
    env = dict(os.environ, DATABASE_URL=database_url, DJANGO_SETTINGS_MODULE="reckon.settings", LOG_LEVEL="WARNING")
    done = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, input=stdin, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"manage.py {' '.join(args)} failed:\n{done.stdout}\n{done.stderr[-3000:]}"
    return done.stdout


def _manage_steps(database_url: str, *steps: tuple[str, ...] | str) -> str:
    """One ``manage.py shell`` process against ``database_url`` running each step in order: a tuple
    is the arguments of a ``migrate`` (``call_command``, as ``manage.py migrate`` runs it), a text is
    Python run in a namespace of its own. What the steps print is returned. One process where a
    process a step cost a second or more each (Django's set-up and the migration graph)."""
    lines = ["from django.core.management import call_command"]
    for step in steps:
        if isinstance(step, str):
            lines.append(f"exec({step!r}, {{}})")
        else:
            lines.append(f"call_command('migrate', *{list(step)!r}, interactive=False, verbosity=0)")
    return _manage(database_url, "shell", "-c", "\n".join(lines))


def at_once(*calls, done=None, timeout: float = 60) -> tuple[list, list]:
    """Run each of ``calls`` in a thread of its own, released together by a barrier, as separate
    workers or people would act: each thread on its own database connection, closed with its
    kept-alive connections to receivers when it ends. ``done`` is called in each thread once its
    call has returned or raised. Returns (results, errors) in the order they came; an error is a
    result to assert on, never swallowed."""
    import threading

    from django.db import connections

    from recovery import adapters

    barrier = threading.Barrier(len(calls))
    results, errors = [], []

    def act(call):
        try:
            barrier.wait(timeout=10)
            results.append(call())
        except Exception as exc:
            errors.append(exc)
        finally:
            if done is not None:
                done()
            connections.close_all()
            adapters.connections_close()

    threads = [threading.Thread(target=act, args=(call,)) for call in calls]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=timeout)
    assert not any(t.is_alive() for t in threads), f"a thread did not finish within {timeout} s"
    return results, errors
