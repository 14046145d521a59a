"""``manage.py bench load`` keeps working: a few seconds of the production-shaped load on
PostgreSQL and Redis, then its checks. Not a timed test: it asserts the PASS lines and the report's
parts, never a figure."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHECKS = [
    "every acknowledged event is in the log exactly once",
    "no call was executed twice",
    "every call settled as done took effect exactly once",
    "no request failed",
    "reconciliation settled every call it could",
]


def _bench(tmp_path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "RECKON_VAR_DIR": str(tmp_path), "TEST_DATABASE_NAME": f"test_bench_load_{uuid.uuid4().hex[:8]}"}
    return subprocess.run([sys.executable, "manage.py", "bench", "load", *args], check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.postgres
@pytest.mark.broker
def test_a_short_load_passes_every_check_and_reports_each_route(tmp_path):
    done = _bench(tmp_path, "--duration", "5", "--agents", "4", "--web-workers", "2", "--drain", "40")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    lines = done.stdout.splitlines()
    for check in CHECKS:
        assert any(line.startswith(f"PASS {check}:") for line in lines), (check, done.stdout[-3000:])
    assert not any(line.startswith("FAIL") for line in lines)
    for route in ("POST /api/runs/[id]/events ", "POST /api/runs/[id]/lease "):  # the agents' routes, timed
        assert any(line.startswith(route) for line in lines), route
    # The operators' screens, timed: their sign-in page alone (printed even when they signed in
    # during the warm-up only) is not one of them.
    screens = ("GET /overview/", "GET /queue/", "GET /runs/", "GET /decisions/", "GET /calls/[pk]/")
    assert any(line.startswith(screens) for line in lines), done.stdout[-3000:]
    assert any(line.startswith("appended: ") and "events/s" in line for line in lines)
    assert any(line.startswith("uncertain calls: ") for line in lines)


def test_a_duration_that_is_not_a_positive_number_is_refused_in_one_line(tmp_path):
    done = _bench(tmp_path, "--duration", "-5", timeout=60)
    assert done.returncode != 0
    assert "'-5' is not a positive number of seconds" in done.stderr
    assert "Traceback" not in done.stderr
