"""Crash injection: a real worker process (``manage.py reconcile --once``) is stopped at a named point
and killed with SIGKILL; a fresh worker then finishes the job. The effect exists exactly once and the
log explains every step. Also: a worker whose lease ran out while it paused is fenced."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from recovery.models import UncertainCall
from recovery.tasks import reconcile_call
from runs.models import LeaseRecord
from runs.store import events_read
from tests.api.live import database_url
from tests.recovery.helpers import correction, crashed_run

pytestmark = pytest.mark.django_db(transaction=True)
ROOT = Path(__file__).resolve().parents[2]
LEASE_S = 1


def _worker(tmp_path: Path, pause_at: str | None) -> tuple[subprocess.Popen, Path]:
    env = dict(os.environ, DATABASE_URL=database_url(), RECKON_RECOVERY_LEASE_SECONDS=str(LEASE_S), LOG_LEVEL="WARNING", RECKON_LOG_LEVEL="WARNING")
    marker = tmp_path / f"paused-{pause_at}-{time.monotonic_ns()}"
    env.pop("RECKON_FAULT_AT", None)
    if pause_at:
        env.update(RECKON_FAULT_AT=pause_at, RECKON_FAULT_FILE=str(marker))
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "reconcile", "--once", "--json"], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    return proc, marker


def _wait_for(marker: Path, proc: subprocess.Popen, timeout: float = 90) -> None:
    end = time.monotonic() + timeout
    while not marker.exists():
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"worker exited ({proc.returncode}) before its pause point: {out} {err[-2000:]}")
        if time.monotonic() > end:
            proc.kill()
            proc.communicate()
            raise AssertionError("worker never reached its pause point")
        time.sleep(0.02)


def _kill_at(tmp_path: Path, point: str) -> None:
    proc, marker = _worker(tmp_path, point)
    _wait_for(marker, proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=10)  # reaps it and closes its pipes
    assert proc.returncode == -signal.SIGKILL


def _restart(tmp_path: Path) -> str:
    time.sleep(LEASE_S + 0.3)  # the killed worker's lease must expire before anyone may take over
    proc, _ = _worker(tmp_path, None)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-2000:]
    return out


def _story(run_id: str, after: int) -> list[tuple]:
    out = []
    for e in events_read(run_id=run_id, after=after):
        p = e.payload
        out.append((e.type, p.get("outcome") or p.get("source") or p.get("disposition") or ("retry" if p.get("retry_of") else None)))
    return out


def test_a_worker_killed_after_the_lookup_leaves_nothing_and_the_next_one_retries_once(policies, tmp_path):
    ledger = policies
    (call,) = crashed_run("run-crash-1", [("call_03", "post_correction", correction())])

    _kill_at(tmp_path, "after_lookup")
    assert ledger.lookups[call.idempotency_key] == 1
    assert _story("run-crash-1", call.uncertain_seq) == []  # the lookup's answer died with the worker

    _restart(tmp_path)

    assert ledger.effects == {call.idempotency_key: 1}
    assert _story("run-crash-1", call.uncertain_seq) == [
        ("reconciliation_attempted", "absent"),
        ("tool_call_started", "retry"),
        ("tool_call_completed", "retry"),
        ("tool_call_resolved", "retried"),
    ]
    assert LeaseRecord.objects.filter(run_id="run-crash-1", kind="takeover").exists()


def test_a_worker_killed_after_the_receiver_accepted_the_retry_is_settled_by_lookup_not_a_second_effect(policies, tmp_path):
    ledger = policies
    (call,) = crashed_run("run-crash-2", [("call_03", "post_correction", correction())])

    _kill_at(tmp_path, "after_execute")
    assert ledger.effects == {call.idempotency_key: 1}
    assert _story("run-crash-2", call.uncertain_seq) == [("reconciliation_attempted", "absent"), ("tool_call_started", "retry")]

    _restart(tmp_path)

    assert ledger.effects == {call.idempotency_key: 1}
    assert ledger.executes == {call.idempotency_key: 1}
    assert _story("run-crash-2", call.uncertain_seq) == [
        ("reconciliation_attempted", "absent"),
        ("tool_call_started", "retry"),
        ("reconciliation_attempted", "match"),  # the retry's effect, found by the next worker
        ("tool_call_completed", "reconciliation"),
        ("tool_call_resolved", "completed"),
    ]
    call.refresh_from_db()
    assert (call.state, call.attempts) == (UncertainCall.State.RESOLVED, 2)


def test_a_worker_killed_after_its_append_but_before_the_ack_writes_nothing_twice_on_redelivery(policies, tmp_path):
    ledger = policies
    (call,) = crashed_run("run-crash-3", [("call_03", "post_correction", correction())])

    _kill_at(tmp_path, "after_append")
    story = _story("run-crash-3", call.uncertain_seq)
    assert story[-1] == ("tool_call_resolved", "retried")

    # The broker redelivers the unacknowledged task (attempt 1), and a new pass runs too.
    time.sleep(LEASE_S + 0.3)
    assert reconcile_call.apply(args=[call.pk, 1]).get()["status"] == "skipped"
    _restart(tmp_path)

    assert _story("run-crash-3", call.uncertain_seq) == story
    assert ledger.effects == {call.idempotency_key: 1}


def test_a_worker_whose_lease_ran_out_while_paused_is_fenced_and_writes_nothing(policies, tmp_path):
    from recovery.reconcile import call_reconcile

    ledger = policies
    (call,) = crashed_run("run-fence", [("call_03", "post_correction", correction())])
    ledger.seed(call.idempotency_key, correction())
    proc, marker = _worker(tmp_path, "after_lookup")
    _wait_for(marker, proc)
    time.sleep(LEASE_S + 0.3)

    # Another worker takes the run over and settles the call.
    assert call_reconcile(pk=call.pk).action == "complete"
    before = _story("run-fence", 0)

    Path(str(marker) + ".go").touch()  # the paused worker wakes up, still believing it owns the run
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err[-2000:]
    assert '"fenced": 1' in out
    assert _story("run-fence", 0) == before
    assert LeaseRecord.objects.filter(run_id="run-fence", kind="fenced").exists()
    assert ledger.executes == {}
