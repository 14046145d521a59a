"""The Procfile under honcho, as `make run` starts it: web, worker and beat against PostgreSQL and
Redis, one reconciliation done by them, and a clean stop on SIGTERM.

Beat's scan runs every second here; it detects the crashed run's uncertain call and the worker
reconciles it against a real ledger on 127.0.0.1. Every task goes to a queue of this test's own
(CELERY_DEFAULT_QUEUE), so no other worker on the same Redis can take them, and this worker takes
nobody else's."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
import uuid

import pytest

from recovery.models import UncertainCall
from tests.api.live import PYTHON, ROOT, child_env, free_port
from tests.recovery.helpers import correction, crashed_run

pytestmark = [pytest.mark.postgres, pytest.mark.broker, pytest.mark.django_db(transaction=True)]


def _get(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def _wait(what: str, check, seconds: float, log) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    pytest.fail(f"{what} within {seconds} s; honcho's output:\n{log()}")


def test_honcho_runs_web_worker_and_beat_and_stops_them_cleanly(policies, tmp_path):
    ledger = policies
    (call,) = crashed_run("run-procfile", [("call_01", "post_correction", correction())])
    ledger.seed(call.idempotency_key, correction())

    port = free_port()
    out = tmp_path / "honcho.log"
    env = child_env(
        WEB_BIND=f"127.0.0.1:{port}", WEB_WORKERS="1", WEB_THREADS="2", WORKER_CONCURRENCY="1",
        CELERY_DEFAULT_QUEUE=f"test-{uuid.uuid4().hex[:12]}", RECKON_RECOVERY_SCAN_S="1",
        RECKON_RECOVERY_BACKOFF_S="0", RECKON_VAR_DIR=str(tmp_path), PROMETHEUS_MULTIPROC_DIR="",
        PATH=f"{os.path.dirname(PYTHON)}:{os.environ.get('PATH', '')}", PYTHONUNBUFFERED="1",
    )
    with open(out, "wb") as sink:
        proc = subprocess.Popen([os.path.join(os.path.dirname(PYTHON), "honcho"), "-f", "Procfile", "start"], cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT)

    def log() -> str:
        return out.read_text(errors="replace")

    try:
        _wait("/readyz answered 200", lambda: _ready(port), 30, log)
        assert _get(f"http://127.0.0.1:{port}/healthz") == (200, {"status": "ok"})

        def resolved() -> bool:
            call.refresh_from_db()
            return call.state == UncertainCall.State.RESOLVED

        _wait("the worker reconciled the call", resolved, 25, log)
        assert call.disposition == "completed" and ledger.executes == {}
        lines = log().splitlines()
        assert any("beat.1" in line and "Sending due task recovery-scan (recovery.tasks.reconcile_scan)" in line for line in lines)
        assert any("worker.1" in line and "Task recovery.tasks.reconcile_scan[" in line and "received" in line for line in lines)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            pytest.fail(f"honcho did not stop within 15 s of SIGTERM:\n{log()}")
    text = log()
    for name in ("web.1", "worker.1", "beat.1"):
        assert f"{name} stopped (rc=0)" in text, f"{name} did not stop cleanly:\n{text}"
    assert "SIGKILL" not in text


def _ready(port: int) -> bool:
    try:
        return _get(f"http://127.0.0.1:{port}/readyz")[0] == 200
    except OSError:
        return False
