"""A pytest plugin (``-p tests.session_env`` in pyproject.toml): the settings the test session's own
receivers need, set before pytest-django loads the settings and inherited by the child processes
tests start (gunicorn, Celery workers, commands).

- ``RECKON_OUTBOUND_ALLOW=127.0.0.1,localhost``: the suite's receivers (ledgers, webhook and
  PagerDuty sinks) listen on 127.0.0.1, an address Reckon refuses to call unless it is named
  (recovery/outbound.py). Tests of the refusal name another allowlist for themselves.
- ``RECKON_LOOKUP_MODULES=tests``: the python adapter's functions the tests name live under tests/.
- ``RECKON_BENCH=1``: the benchmarks' app, left out of production's, is installed for the tests
  of the benchmarks (tests/bench, tests/runs/test_bench_command.py).

A value given by the caller is used as it is.

The suite runs on both cores (pytest-xdist, ``-n auto`` in ``make test``), and two checkouts may
run it at once on one machine, so nothing one test process keeps is named by a constant: each
process (the xdist controller's workers gw0, gw1, ..., or the one process without xdist) gets

- ``RECKON_VAR_DIR``: a folder of its own (the SQLite test database, the secret key, checkpoints),
  made fresh under the system's temporary folder and removed at the end, or a subfolder per
  worker of the one the caller gave;
- ``CELERY_DEFAULT_QUEUE`` and ``CACHE_KEY_PREFIX``: names of this run and this worker, so tasks
  and rate-limit counters in a shared Redis stay apart.

The PostgreSQL test database is named from the run as well (``TEST_DATABASE_NAME``,
``test_reckon_<run>``), and pytest-django adds its per-worker suffix (``..._gw0``, ...), so two
checkouts testing on one PostgreSQL server at once never create or drop each other's database.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid

os.environ.setdefault("RECKON_OUTBOUND_ALLOW", "127.0.0.1,localhost")
os.environ.setdefault("RECKON_LOOKUP_MODULES", "tests")
os.environ.setdefault("RECKON_BENCH", "1")

# The run's name: made by the first process (the xdist controller, or the only one) and inherited
# by its workers, so the workers' names share it.
RUN = os.environ.setdefault("RECKON_TEST_RUN", uuid.uuid4().hex[:10])
os.environ.setdefault("TEST_DATABASE_NAME", f"test_reckon_{RUN}")
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "main")
_given = {name: os.environ.get(f"RECKON_TEST_GIVEN_{name}", os.environ.get(name)) for name in ("RECKON_VAR_DIR", "CELERY_DEFAULT_QUEUE", "CACHE_KEY_PREFIX")}
for _name, _value in _given.items():
    # What the caller gave, remembered for the workers (which inherit the controller's own values).
    os.environ[f"RECKON_TEST_GIVEN_{_name}"] = _value or ""

_made: str | None = None
if _given["RECKON_VAR_DIR"]:
    os.environ["RECKON_VAR_DIR"] = _given["RECKON_VAR_DIR"] if WORKER == "main" else os.path.join(_given["RECKON_VAR_DIR"], WORKER)
else:
    _made = os.environ["RECKON_VAR_DIR"] = tempfile.mkdtemp(prefix=f"reckon-test-{RUN}-{WORKER}-")
os.environ["CELERY_DEFAULT_QUEUE"] = f"{_given['CELERY_DEFAULT_QUEUE'] or 'reckon-test'}-{RUN}-{WORKER}"
os.environ["CACHE_KEY_PREFIX"] = f"{_given['CACHE_KEY_PREFIX'] or 'reckon-test'}-{RUN}-{WORKER}"


def pytest_unconfigure(config):
    if _made:
        shutil.rmtree(_made, ignore_errors=True)
