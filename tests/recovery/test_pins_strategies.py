"""Pins the provider_idempotency and compensate strategies as docs/recovery.md states them, against
the real Ledger on 127.0.0.1 (its effect counters say what actually happened on the receiver):

- no lookup hook, provider_idempotency: retry with the same key (the receiver deduplicates);
- no lookup hook, compensate: run the inverse;
- absent with compensate: ask a person; a person's ``compensate`` decision runs the compensate hook.
"""

from __future__ import annotations

import pytest

from recovery.decisions import decision_record
from recovery.models import UncertainCall
from recovery.policy_changes import policies_load
from recovery.reconcile import call_reconcile, reconcile_pass
from runs.selectors import run_state
from runs.store import events_read
from tests.recovery.helpers import correction, crashed_run, policies_text, types_after

pytestmark = pytest.mark.django_db

S = UncertainCall.State
DRAFT = {"tenant": "acme", "title": "Q3 exception ticket", "account": "4020"}


def strategy_tools(url: str) -> str:
    return f"""
[tools.charge_card]
risk_class      = "irreversible"
strategy        = "provider_idempotency"
semantic_fields = ["tenant", "account", "amount", "currency", "period"]
deadline        = "15m"
key_retention   = "24h"
execute = {{ adapter = "http", url = "{url}/operations", method = "POST" }}

[tools.create_draft]
risk_class = "reversible"
strategy   = "compensate"
deadline   = "15m"
compensate = {{ adapter = "http", url = "{url}/reversals", method = "POST" }}

[tools.create_checked_draft]
risk_class = "reversible"
strategy   = "compensate"
deadline   = "15m"
lookup     = {{ adapter = "http", url = "{url}/operations/{{idempotency_key}}", timeout = "400ms" }}
compensate = {{ adapter = "http", url = "{url}/reversals", method = "POST" }}
"""


@pytest.fixture
def ledger(ledger, db):
    policies_load(text=policies_text(ledger.url, extra=strategy_tools(ledger.url)), by="dana.oncall")
    return ledger


def _events(run_id: str, after: int) -> list:
    return [e for e in events_read(run_id=run_id) if e.seq > after]


@pytest.mark.parametrize("reached_receiver", [True, False], ids=["effect-made-before-the-crash", "effect-never-made"])
def test_it_retries_a_provider_idempotency_call_with_the_same_key_without_a_lookup(ledger, reached_receiver):
    (call,) = crashed_run("run-pin-pi", [("c1", "charge_card", correction())])
    key = call.idempotency_key
    if reached_receiver:
        ledger.seed(key, correction())  # the original request was accepted before the worker died

    result = call_reconcile(pk=call.pk)

    assert result.action == "retry"
    assert ledger.lookups == {}, "provider_idempotency has no lookup: none may be made"
    assert ledger.executes == {key: 1}, "one retry, carrying the original key"
    assert ledger.effects == {key: 1}, "the receiver holds the effect once"
    assert types_after("run-pin-pi", call.uncertain_seq) == ["reconciliation_attempted", "tool_call_started", "tool_call_completed", "tool_call_resolved"]
    attempt, start, completion, resolved = _events("run-pin-pi", call.uncertain_seq)
    assert attempt.payload["action"] == "retry" and "provider_idempotency" in attempt.payload["rule"]
    assert (start.payload["retry_of"], start.payload["idempotency_key"]) == (call.start_seq, key)
    assert (completion.payload["source"], completion.payload["idempotency_key"], completion.payload["is_error"]) == ("retry", key, False)
    assert completion.payload["content"]["id"] == "OP-1"  # the receiver's stored result, not a new operation
    assert resolved.payload["disposition"] == "retried"
    call.refresh_from_db()
    assert (call.state, call.disposition, call.resolution_kind) == (S.RESOLVED, "retried", "automatic")
    state = run_state(run_id="run-pin-pi")
    assert state.completed_calls[key]["id"] == "OP-1" and state.uncertain_calls == []

    reconcile_pass(due_only=False)
    assert ledger.executes == {key: 1} and ledger.effects == {key: 1}


def test_it_compensates_a_compensate_call_automatically_and_never_redoes_it(ledger):
    (call,) = crashed_run("run-pin-comp", [("c1", "create_draft", DRAFT)])
    key = call.idempotency_key

    result = call_reconcile(pk=call.pk)

    assert result.action == "compensate"
    assert ledger.lookups == {}
    assert key not in ledger.executes, "compensation must not perform the call again"
    (inverse,) = ledger.executes
    assert inverse != key and inverse.startswith(key), "the inverse carries its own key, derived from the call's"
    assert ledger.executes == {inverse: 1} and ledger.effects == {inverse: 1}
    assert types_after("run-pin-comp", call.uncertain_seq) == ["reconciliation_attempted", "tool_call_resolved"]
    attempt, resolved = _events("run-pin-comp", call.uncertain_seq)
    assert attempt.payload["action"] == "compensate"
    assert (resolved.payload["disposition"], resolved.payload["idempotency_key"], resolved.payload["start_seq"]) == ("compensated", key, call.start_seq)
    assert "by" not in resolved.payload
    call.refresh_from_db()
    assert (call.state, call.disposition, call.resolution_kind) == (S.RESOLVED, "compensated", "automatic")
    state = run_state(run_id="run-pin-comp")
    assert key not in state.completed_calls, "a compensated call is not a completed one"
    assert state.uncertain_calls == [] and state.resolutions == {key: "compensated"}

    reconcile_pass(due_only=False)
    assert ledger.executes == {inverse: 1}


def test_it_asks_a_person_on_absence_and_carries_out_their_compensate_decision(ledger):
    (call,) = crashed_run("run-pin-comp-op", [("c1", "create_checked_draft", DRAFT)])
    key = call.idempotency_key

    result = call_reconcile(pk=call.pk)

    assert (result.action, result.outcome) == ("escalate", "absent")
    assert ledger.executes == {} and ledger.lookups == {key: 1}
    call.refresh_from_db()
    assert (call.state, call.approval_pending) == (S.ESCALATED, True)
    before = events_read(run_id="run-pin-comp-op")[-1].seq

    decision_record(pk=call.pk, decision="compensate", by="olivia.oncall", reason="the draft may exist: withdraw it", seen_version=call.version)

    assert key not in ledger.executes
    (inverse,) = ledger.executes
    assert inverse.startswith(key) and ledger.effects == {inverse: 1}
    decided, resolved = _events("run-pin-comp-op", before)
    assert (decided.type, decided.payload["decision"], decided.payload["approved"], decided.payload["by"]) == ("approval_decided", "compensate", True, "olivia.oncall")
    assert (resolved.type, resolved.payload["disposition"], resolved.payload["by"]) == ("tool_call_resolved", "compensated", "olivia.oncall")
    call.refresh_from_db()
    assert (call.state, call.disposition, call.resolution_kind, call.resolved_by, call.approval_pending) == (S.RESOLVED, "compensated", "person", "olivia.oncall", False)
    state = run_state(run_id="run-pin-comp-op")
    assert key not in state.completed_calls and state.resolutions == {key: "compensated"}
