"""The four lookup outcomes (docs/recovery.md, "The rules"), end to end against a real HTTP ledger on 127.0.0.1."""

from __future__ import annotations

import pytest

from recovery.models import UncertainCall
from recovery.reconcile import call_reconcile, reconcile_pass
from runs.selectors import run_state
from runs.store import events_read
from tests.recovery.helpers import correction, crashed_run, types_after

pytestmark = pytest.mark.django_db

S = UncertainCall.State


def test_a_matching_operation_is_completed_from_the_evidence_without_executing_again(policies):
    ledger = policies
    (call,) = crashed_run("run-match", [("call_03", "post_correction", correction())])
    ledger.seed(call.idempotency_key, correction())
    assert call.state == S.OPEN

    result = call_reconcile(pk=call.pk)

    assert (result.action, result.outcome) == ("complete", "match")
    call.refresh_from_db()
    assert (call.state, call.disposition, call.resolution_kind) == (S.RESOLVED, "completed", "automatic")
    assert ledger.executes == {}
    assert ledger.effects[call.idempotency_key] == 1
    completion = [e for e in events_read(run_id="run-match") if e.type == "tool_call_completed"][-1]
    assert completion.payload["source"] == "reconciliation"
    assert completion.payload["idempotency_key"] == call.idempotency_key
    state = run_state(run_id="run-match")
    assert call.idempotency_key in state.completed_calls
    assert state.uncertain_calls == []


def test_an_authoritative_absence_is_retried_once_with_the_same_key(policies):
    ledger = policies
    (call,) = crashed_run("run-absent", [("call_03", "post_correction", correction())])

    result = call_reconcile(pk=call.pk)

    assert (result.action, result.outcome) == ("retry", "absent")
    call.refresh_from_db()
    assert (call.state, call.disposition) == (S.RESOLVED, "retried")
    assert ledger.executes == {call.idempotency_key: 1}
    assert ledger.effects == {call.idempotency_key: 1}
    assert types_after("run-absent", call.uncertain_seq) == [
        "reconciliation_attempted",
        "tool_call_started",  # the retry's start, durable before the request left
        "tool_call_completed",
        "tool_call_resolved",
    ]
    events = events_read(run_id="run-absent")
    assert events[-2].payload["source"] == "retry"
    assert events[-3].payload["retry_of"] == call.start_seq
    assert run_state(run_id="run-absent").uncertain_calls == []
    # A second pass finds nothing to do: the effect stays single.
    reconcile_pass(due_only=False)
    assert ledger.effects == {call.idempotency_key: 1}


def test_a_conflicting_operation_pauses_the_run_and_escalates_with_both_payloads(policies):
    ledger = policies
    (call,) = crashed_run("run-conflict", [("call_03", "post_correction", correction(amount="840.00"))])
    ledger.seed(call.idempotency_key, correction(amount="480.00"))  # C-771 for 480 instead of 840

    result = call_reconcile(pk=call.pk)

    assert (result.action, result.outcome) == ("pause_escalate", "conflict")
    call.refresh_from_db()
    assert (call.state, call.escalation_reason, call.approval_pending) == (S.ESCALATED, "conflict", True)
    assert ledger.executes == {}
    assert run_state(run_id="run-conflict").status == "paused"
    events = events_read(run_id="run-conflict")
    assert [e.type for e in events[-3:]] == ["reconciliation_attempted", "run_paused", "approval_requested"]
    comparison = events[-3].payload["evidence"]["comparison"]
    assert comparison["amount"] == {"expected": "840.00", "observed": "480.00", "equal": False}
    assert comparison["account"]["equal"] is True
    request = events[-1].payload
    assert request["arguments"]["amount"] == "840.00"
    assert request["evidence"]["observed"]["amount"] == "480.00"
    assert request["idempotency_key"] == call.idempotency_key and request["started_at"]
    # Escalated calls wait for a person: another pass does not touch them.
    assert call_reconcile(pk=call.pk).status == "skipped"


@pytest.mark.parametrize("mode", ["unavailable", "timeout", "not_final", "garbage"])
def test_missing_evidence_keeps_the_call_uncertain_and_never_executes(policies, mode):
    ledger = policies
    (call,) = crashed_run(f"run-{mode}", [("call_03", "post_correction", correction())])
    ledger.modes[call.idempotency_key] = mode

    result = call_reconcile(pk=call.pk)

    assert (result.action, result.outcome) == ("backoff", "unavailable")
    call.refresh_from_db()
    assert call.state == S.RECONCILING and call.attempts == 1
    assert call.next_attempt_at is not None and call.next_attempt_at > call.last_attempt_at
    assert call.last_error
    assert ledger.executes == {}
    assert call.idempotency_key not in run_state(run_id=f"run-{mode}").completed_calls

    # When the ledger answers again, evidence settles it.
    del ledger.modes[call.idempotency_key]
    assert call_reconcile(pk=call.pk).action == "retry"
    assert ledger.effects == {call.idempotency_key: 1}



def test_a_semantic_field_missing_from_the_receivers_record_is_a_conflict_not_a_match(policies):
    # The agent sent no period (null); the ledger's record has no period at all. A field the
    # receiver does not state is not confirmed: the two null-looking sides are not "equal".
    ledger = policies
    args = {**correction(), "period": None}
    (call,) = crashed_run("run-field-missing", [("call_03", "post_correction", args)])
    record = correction()
    del record["period"]
    ledger.seed(call.idempotency_key, record)

    result = call_reconcile(pk=call.pk)

    assert (result.action, result.outcome) == ("pause_escalate", "conflict")
    call.refresh_from_db()
    assert (call.state, call.escalation_reason) == (S.ESCALATED, "conflict")
    assert ledger.executes == {} and call.idempotency_key not in run_state(run_id="run-field-missing").completed_calls
    comparison = next(e for e in events_read(run_id="run-field-missing") if e.type == "reconciliation_attempted").payload["evidence"]["comparison"]
    assert comparison["period"] == {"expected": None, "observed": None, "equal": False}
    assert all(comparison[name]["equal"] for name in ("tenant", "account", "amount", "currency"))


@pytest.mark.parametrize("body", [b'{"final": false}', b'{"final": null}', b'{"final": "true"}', b'{"final": 1}', b'{"final": [true]}'])
def test_a_404_is_authoritative_only_when_final_is_true_not_merely_present(policies, body):
    ledger = policies
    (call,) = crashed_run("run-final", [("call_03", "post_correction", correction())])
    ledger.canned[call.idempotency_key] = (404, "application/json", body)

    result = call_reconcile(pk=call.pk)

    assert (result.action, result.outcome) == ("backoff", "unavailable")
    call.refresh_from_db()
    assert call.state == S.RECONCILING and 'without {"final": true}' in call.last_error
    assert ledger.executes == {} and ledger.effects == {}

def test_a_tool_with_an_escalate_strategy_asks_a_person_on_absence(policies):
    ledger = policies
    args = {"tenant": "initech", "notice": "NTC-22", "recipient": "fca"}
    (call,) = crashed_run("run-notice", [("call_n2", "notify_regulator", args)])

    assert call_reconcile(pk=call.pk).action == "escalate"
    call.refresh_from_db()
    assert call.state == S.ESCALATED and ledger.executes == {}
    assert run_state(run_id="run-notice").status == "awaiting_approval"


def test_a_pass_over_many_calls_leaves_no_effect_twice(policies):
    ledger = policies
    calls = crashed_run(
        "run-many",
        [(f"call_{i}", "post_correction", correction(ref=f"C-{i}", account=str(4000 + i))) for i in range(6)],
    )
    ledger.seed(calls[0].idempotency_key, correction(ref="C-0", account="4000"))
    ledger.seed(calls[1].idempotency_key, correction(ref="C-1", account="4001", amount="1.00"))
    ledger.modes[calls[2].idempotency_key] = "unavailable"

    reconcile_pass(due_only=False)
    reconcile_pass(due_only=False)

    states = dict(UncertainCall.objects.filter(run_id="run-many").values_list("call_id", "state"))
    assert states == {"call_0": S.RESOLVED, "call_1": S.ESCALATED, "call_2": S.RECONCILING, "call_3": S.RESOLVED, "call_4": S.RESOLVED, "call_5": S.RESOLVED}
    assert all(n == 1 for n in ledger.effects.values())
    assert set(ledger.executes) == {c.idempotency_key for c in calls[3:]}
