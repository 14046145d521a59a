"""Two workers given the same call at the same moment: one acts, the other stands off, one set of events."""

from __future__ import annotations


import pytest

from recovery.reconcile import call_reconcile
from runs.store import events_read
from tests.recovery.helpers import correction, crashed_run
from tests.helpers import at_once

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


def test_two_workers_released_together_on_one_call_produce_one_set_of_events(policies):
    ledger = policies
    (call,) = crashed_run("run-race", [("call_03", "post_correction", correction())])
    before = len(events_read(run_id="run-race"))
    worker = lambda: call_reconcile(pk=call.pk)  # noqa: E731
    results, errors = at_once(worker, worker)

    assert errors == []
    statuses = sorted(r.status for r in results)
    # The loser either could not take the live lease, was fenced at append, or arrived after the
    # winner had settled the call; in every case it wrote nothing.
    assert statuses[0] == "acted" and statuses[1] in ("busy", "fenced", "skipped"), statuses
    types = [e.type for e in events_read(run_id="run-race")[before:]]
    assert types == ["reconciliation_attempted", "tool_call_started", "tool_call_completed", "tool_call_resolved"]
    assert ledger.effects == {call.idempotency_key: 1}
    assert ledger.executes == {call.idempotency_key: 1}
