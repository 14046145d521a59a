"""The reconciliation task through a real Celery worker on Redis (CI's second pass): the same
service, but enqueued to the broker and run by another process against the same database."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid

import pytest

from recovery.models import UncertainCall
from recovery.tasks import reconcile_call
from runs.store import events_read
from tests.api.live import ROOT, child_env
from tests.recovery.helpers import correction, crashed_run

pytestmark = [pytest.mark.broker, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def worker():
    """A worker process consuming a queue of its own, so it can never pick up anyone else's task."""
    queue = f"test-{uuid.uuid4().hex[:12]}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "reckon", "worker", "-Q", queue, "-c", "1", "-P", "solo",
         "--without-heartbeat", "--without-mingle", "--without-gossip", "--loglevel", "WARNING"],
        cwd=ROOT,
        env=child_env(),
    )
    yield queue
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def test_a_worker_on_redis_reconciles_a_matching_call_once(policies, worker):
    ledger = policies
    (call,) = crashed_run("run-worker", [("call_03", "post_correction", correction())])
    ledger.seed(call.idempotency_key, correction())

    reconcile_call.apply_async(args=[call.pk, 1], queue=worker)
    # A redelivery of the same attempt (acks_late after a lost worker) must write nothing more.
    reconcile_call.apply_async(args=[call.pk, 1], queue=worker)

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        call.refresh_from_db()
        if call.state == UncertainCall.State.RESOLVED:
            break
        time.sleep(0.2)
    assert call.state == UncertainCall.State.RESOLVED and call.disposition == "completed"
    time.sleep(1.0)  # let the duplicate delivery run too
    events = events_read(run_id="run-worker")
    assert [e.type for e in events].count("reconciliation_attempted") == 1
    completions = [e for e in events if e.type == "tool_call_completed"]
    assert len(completions) == 1 and completions[0].payload["source"] == "reconciliation"
    assert ledger.executes == {} and ledger.effects == {call.idempotency_key: 1}
