"""Two workers given the same call at the same moment: one acts, the other stands off, one set of events."""

from __future__ import annotations

import threading

import pytest
from django.db import connections

from recovery import adapters
from recovery.reconcile import call_reconcile
from runs.store import events_read
from tests.recovery.helpers import correction, crashed_run

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


def test_two_workers_released_together_on_one_call_produce_one_set_of_events(policies):
    ledger = policies
    (call,) = crashed_run("run-race", [("call_03", "post_correction", correction())])
    before = len(events_read(run_id="run-race"))
    barrier = threading.Barrier(2)
    results, errors = [], []

    def worker():
        try:
            barrier.wait(timeout=10)
            results.append(call_reconcile(pk=call.pk))
        except Exception as exc:  # reported below, never swallowed
            errors.append(exc)
        finally:
            connections.close_all()  # each thread has its own real connection
            adapters.connections_close()  # and its own kept-alive connection to the ledger

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)

    assert errors == []
    statuses = sorted(r.status for r in results)
    # The loser either could not take the live lease, was fenced at append, or arrived after the
    # winner had settled the call; in every case it wrote nothing.
    assert statuses[0] == "acted" and statuses[1] in ("busy", "fenced", "skipped"), statuses
    types = [e.type for e in events_read(run_id="run-race")[before:]]
    assert types == ["reconciliation_attempted", "tool_call_started", "tool_call_completed", "tool_call_resolved"]
    assert ledger.effects == {call.idempotency_key: 1}
    assert ledger.executes == {call.idempotency_key: 1}
