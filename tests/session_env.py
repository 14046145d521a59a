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
"""

from __future__ import annotations

import os

os.environ.setdefault("RECKON_OUTBOUND_ALLOW", "127.0.0.1,localhost")
os.environ.setdefault("RECKON_LOOKUP_MODULES", "tests")
os.environ.setdefault("RECKON_BENCH", "1")
