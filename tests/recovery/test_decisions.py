"""People's decisions, claims and notes on uncertain calls: under the run's lease, refused when stale."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from recovery.decisions import call_assign, call_claim, call_note, decision_record
from recovery.errors import InvalidDecision, RunBusy, StaleDecision
from recovery.models import UncertainCall
from recovery.reconcile import call_reconcile
from runs.leases import lease_acquire
from runs.selectors import run_state
from runs.store import events_read
from tests.recovery.helpers import correction, crashed_run
from tests.helpers import at_once

pytestmark = pytest.mark.django_db
S = UncertainCall.State
ONCALL = "dana.oncall"
REVIEWER = "omar.compliance"


def _escalated(run_id: str, ledger) -> UncertainCall:
    args = {"tenant": "initech", "notice": "NTC-22", "recipient": "fca"}
    (call,) = crashed_run(run_id, [("call_n2", "notify_regulator", args)])
    call_reconcile(pk=call.pk)
    call.refresh_from_db()
    assert call.state == S.ESCALATED
    return call


def test_an_operator_records_that_it_happened_and_the_run_learns_the_key(policies):
    call = _escalated("run-d1", policies)
    decision_record(pk=call.pk, decision="happened", by=ONCALL, reason="FCA portal shows submission FCA-2026-11-0042", seen_version=call.version, evidence_ref="FCA-2026-11-0042")
    call.refresh_from_db()
    assert (call.state, call.disposition, call.resolution_kind, call.resolved_by) == (S.RESOLVED, "completed", "person", ONCALL)
    events = events_read(run_id="run-d1")
    decided = next(e for e in events if e.type == "approval_decided")
    assert {k: decided.payload[k] for k in ("call_id", "approved", "by", "reason", "decision", "idempotency_key")} == {
        "call_id": "call_n2",
        "approved": True,
        "by": ONCALL,
        "reason": "FCA portal shows submission FCA-2026-11-0042",
        "decision": "happened",
        "idempotency_key": call.idempotency_key,
    }
    assert [e.payload.get("source") for e in events if e.type == "tool_call_completed"] == ["operator"]
    state = run_state(run_id="run-d1")
    assert call.idempotency_key in state.completed_calls and state.status == "running"


def test_a_decision_taken_on_a_stale_view_is_refused_and_a_double_submit_writes_once(policies):
    call = _escalated("run-d2", policies)
    seen = call.version
    call_note(pk=call.pk, by=REVIEWER, text="checking with the regulator desk")
    with pytest.raises(StaleDecision, match="changed since you saw it"):
        decision_record(pk=call.pk, decision="not_happened", by=ONCALL, reason="nothing on the portal", seen_version=seen)
    call.refresh_from_db()
    n = len(events_read(run_id="run-d2"))
    decision_record(pk=call.pk, decision="not_happened", by=ONCALL, reason="nothing on the portal", seen_version=call.version)
    with pytest.raises(StaleDecision):
        decision_record(pk=call.pk, decision="not_happened", by=ONCALL, reason="nothing on the portal", seen_version=call.version)
    assert [e.type for e in events_read(run_id="run-d2")[n:]] == ["approval_decided", "tool_call_resolved"]


def test_a_person_may_retry_with_the_same_key_through_the_execute_hook(policies):
    ledger = policies
    (call,) = crashed_run("run-d3", [("call_03", "post_correction", correction())])
    ledger.modes[call.idempotency_key] = "unavailable"
    call_reconcile(pk=call.pk)
    call.refresh_from_db()
    decision_record(pk=call.pk, decision="retry_same_key", by=ONCALL, reason="ledger vendor confirmed the key is honoured for 24h", seen_version=call.version)
    call.refresh_from_db()
    assert (call.state, call.disposition) == (S.RESOLVED, "retried")
    assert ledger.effects == {call.idempotency_key: 1}
    assert [e.payload.get("source") for e in events_read(run_id="run-d3") if e.type == "tool_call_completed"] == ["retry"]


def test_decisions_the_policy_cannot_carry_out_are_refused_before_anything_is_written(policies):
    call = _escalated("run-d4", policies)
    n = len(events_read(run_id="run-d4"))
    with pytest.raises(InvalidDecision, match="no execute hook"):
        decision_record(pk=call.pk, decision="retry_same_key", by=ONCALL, reason="try", seen_version=call.version)
    with pytest.raises(InvalidDecision, match="no compensate hook"):
        decision_record(pk=call.pk, decision="compensate", by=ONCALL, reason="undo", seen_version=call.version)
    with pytest.raises(InvalidDecision, match="not one of"):
        decision_record(pk=call.pk, decision="try_again", by=ONCALL, reason="?", seen_version=call.version)
    with pytest.raises(InvalidDecision, match="needs a reason"):
        decision_record(pk=call.pk, decision="happened", by=ONCALL, reason="  ", seen_version=call.version)
    assert len(events_read(run_id="run-d4")) == n


def test_escalating_hands_the_call_on_and_keeps_it_waiting(policies):
    call = _escalated("run-d5", policies)
    first = call.escalation_reason
    assert first and first != "escalated"
    decision_record(pk=call.pk, decision="escalate", by=ONCALL, reason="needs the compliance officer", seen_version=call.version)
    call.refresh_from_db()
    # The reason it needed a person stays; the re-escalation is said as such in the log.
    assert (call.state, call.escalation_reason, call.approval_pending) == (S.ESCALATED, first, True)


def test_claims_and_assignments_show_who_is_on_a_call_and_are_part_of_the_history(policies, django_user_model):
    dana = django_user_model.objects.create_user(ONCALL)
    omar = django_user_model.objects.create_user(REVIEWER)
    call = _escalated("run-d6", policies)
    call = call_claim(pk=call.pk, user=dana, seen_version=call.version)
    assert (call.claimed_by, call.claimed_by_name) == (dana, ONCALL)
    call = call_assign(pk=call.pk, user=dana, assignee=omar, seen_version=call.version)
    assert call.claimed_by == omar
    with pytest.raises(StaleDecision):
        call_claim(pk=call.pk, user=dana, seen_version=call.version - 1)
    notes = [e.payload for e in events_read(run_id="run-d6") if e.type == "operator_note"]
    assert [(n["by"], n["action"]) for n in notes] == [(ONCALL, "claim"), (ONCALL, "assign")]


def test_a_person_cannot_write_while_the_agent_owns_the_run(policies):
    call = _escalated("run-d7", policies)
    lease_acquire(run_id="run-d7", holder="agent-7:worker-b")
    with pytest.raises(RunBusy, match="agent-7:worker-b"):
        call_note(pk=call.pk, by=ONCALL, text="hello")


def test_a_reason_over_the_limit_is_refused_naming_the_limit_not_cut(db):
    from recovery.decisions import REASON_MAX, decision_record
    from recovery.errors import InvalidDecision
    from tests.recovery.helpers import _uncertain_call

    call = _uncertain_call("run-long-reason", "acme")
    with pytest.raises(InvalidDecision, match=f"at most {REASON_MAX} characters, got {REASON_MAX + 1}"):
        decision_record(pk=call.pk, decision="escalate", by="olivia.oncall", reason="r" * (REASON_MAX + 1), seen_version=call.version)


def _paused_after_the_first_read(barrier: threading.Barrier, order: dict):
    """A query hook (Django's public ``execute_wrapper``) for one submitting thread: its first read
    of the call runs, then both threads meet at ``barrier`` (each has read the same version and so
    passes the first check), and the second to leave waits until the first has finished its whole
    decision before going on. That is the interleaving the re-check under the lease exists for."""
    state = {"paused": False}

    def hook(execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        if not state["paused"] and "reckon_uncertain_call" in sql:
            state["paused"] = True
            barrier.wait(timeout=10)
            with order["lock"]:
                first = not order["taken"]
                order["taken"] = True
            if not first:
                order["first_done"].wait(timeout=30)
        return result

    return hook


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("decision", ["escalate", "retry_same_key"])
def test_two_people_submitting_the_same_decision_at_once_write_it_once(policies, decision):
    ledger = policies
    if decision == "escalate":
        call = _escalated("run-d-race", ledger)
    else:
        (call,) = crashed_run("run-d-race", [("call_03", "post_correction", correction())])
        ledger.modes[call.idempotency_key] = "unavailable"
        call_reconcile(pk=call.pk)
        call.refresh_from_db()
        ledger.modes.pop(call.idempotency_key)
    n = len(events_read(run_id="run-d-race"))
    barrier = threading.Barrier(2)
    order = {"lock": threading.Lock(), "taken": False, "first_done": threading.Event()}

    def submit(who):
        with connection.execute_wrapper(_paused_after_the_first_read(barrier, order)):
            return decision_record(pk=call.pk, decision=decision, by=who, reason="the desk has not answered", seen_version=call.version)

    # Both read before either writes (the barrier inside the first read); the loser's refusal is an error to assert on.
    results, errors = at_once(lambda: submit(ONCALL), lambda: submit(REVIEWER), done=order["first_done"].set)
    assert len(results) == 1 and [type(e) for e in errors] == [StaleDecision], (results, errors)
    written = [e.type for e in events_read(run_id="run-d-race")[n:]]
    if decision == "escalate":
        assert written == ["approval_decided", "approval_requested"]
    else:
        assert written.count("approval_decided") == 1 and written.count("tool_call_started") == 1
        assert ledger.executes == {call.idempotency_key: 1} and ledger.effects == {call.idempotency_key: 1}
