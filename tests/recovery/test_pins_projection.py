"""Pins the projection's key: the idempotency key RECORDED in the log's tool_call_started is the
call's key, never one computed again from name and arguments (docs/schema-versions.md). A writer may
derive the key when the operation is accepted, so the two can differ."""

from __future__ import annotations

import pytest

from recovery.detection import uncertain_calls_detect
from recovery.models import UncertainCall
from recovery.rebuild import projections_rebuild
from recovery.reconcile import call_reconcile
from reckon_client.identity import call_key
from runs.leases import lease_release
from runs.selectors import run_state
from runs.synthetic import calls_started
from tests.recovery.helpers import correction, snapshot, types_after

pytestmark = pytest.mark.django_db

RUN = "run-pin-key"
RECORDED = "acme-2026Q3-C771-op"  # the operation id the writer bound when the correction was accepted


def _crashed_with_recorded_key() -> UncertainCall:
    lease = calls_started(RUN, [("c1", "post_correction", correction())], holder="agent-7:worker-a", keys={"c1": RECORDED})
    lease_release(run_id=RUN, epoch=lease.epoch)
    assert uncertain_calls_detect(run_id=RUN)["marked"] == 1
    return UncertainCall.objects.get(run_id=RUN)


def test_it_gives_the_uncertain_call_the_key_recorded_in_its_start_not_a_computed_one(db):
    computed = call_key(RUN, "post_correction", correction())
    assert computed != RECORDED
    call = _crashed_with_recorded_key()
    assert call.idempotency_key == RECORDED
    assert run_state(run_id=RUN).uncertain_calls[0].idempotency_key == RECORDED  # the fold agrees

    projections_rebuild()
    assert UncertainCall.objects.get(run_id=RUN).idempotency_key == RECORDED


def test_it_reconciles_with_the_recorded_key_so_the_receiver_is_asked_about_the_right_operation(policies):
    ledger = policies
    computed = call_key(RUN, "post_correction", correction())
    ledger.seed(RECORDED, correction())
    call = _crashed_with_recorded_key()

    result = call_reconcile(pk=call.pk)

    assert (result.action, result.outcome) == ("complete", "match")
    assert ledger.lookups == {RECORDED: 1}, "the lookup must name the recorded key, never the computed one"
    assert computed not in ledger.lookups and not ledger.executes
    assert types_after(RUN, 3) == ["reconciliation_attempted", "tool_call_completed", "tool_call_resolved"]
    call.refresh_from_db()
    assert (call.state, call.disposition, call.idempotency_key) == ("resolved", "completed", RECORDED)
    state = run_state(run_id=RUN)
    assert RECORDED in state.completed_calls and computed not in state.completed_calls
    before = snapshot()
    projections_rebuild()
    assert snapshot() == before
