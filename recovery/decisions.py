"""A person's decisions, claims and notes on an uncertain call, each written under the run's lease.
"""

from __future__ import annotations

import logging

from recovery.calls import call_about, call_row, completion_event, escalation_event, person_name, person_stamped, resolved_event
from recovery.errors import InvalidDecision, NotDecidable, RecoveryError, StaleDecision
from recovery.models import Decision, UncertainCall
from recovery.ownership import owning
from recovery.reconcile import compensate_owned, retry_owned
from recovery.selectors import policy_for
from runs.store import NewEvent

log = logging.getLogger("reckon.recovery")


REASON_MAX = 2000


def _check_version(row: UncertainCall, seen_version) -> None:
    if isinstance(seen_version, bool) or not isinstance(seen_version, int):
        raise InvalidDecision(f"seen_version must be the version number you saw, got {seen_version!r}")
    if row.version != seen_version:
        raise StaleDecision(pk=row.pk, seen_version=seen_version, version=row.version, state=row.state)

def _check_decidable(row: UncertainCall) -> None:
    why = row.decidable()
    if why is not None:
        raise NotDecidable(pk=row.pk, state=row.state, reason=why)

def decision_record(*, pk: int, decision: str, by, reason: str, seen_version: int, evidence_ref: str | None = None) -> UncertainCall:
    """Record a person's decision on an uncertain call and carry it out, all under the run's lease.

    happened: completion source=operator, resolved completed. not_happened: resolved not_happened.
    retry_same_key: retry through the execute hook, then its result. compensate: the compensate hook.
    escalate: hand it on, still escalated. Refused with StaleDecision when the call changed since
    ``seen_version`` (so a double submit writes once), NotDecidable when the call may not be decided
    in its state (``UncertainCall.decidable``: in flight or resolved), InvalidDecision for a decision
    that is not one of ``Decision`` or that the policy cannot carry out; in each case nothing is
    written. Both checks on the call are made again under the run's lease, where they are final.
    """
    if decision not in Decision.values:
        raise InvalidDecision(f"decision {decision!r} is not one of {', '.join(Decision.values)}")
    decision = Decision(decision)
    who = person_name(by)
    if not isinstance(reason, str) or not reason.strip():
        raise InvalidDecision("a decision needs a reason")
    reason = reason.strip()
    if len(reason) > REASON_MAX:
        # Never cut: a reason is the record of why, and a shortened one says something else.
        raise InvalidDecision(f"a reason is at most {REASON_MAX} characters, got {len(reason)}")
    row = call_row(pk)
    _check_version(row, seen_version)
    _check_decidable(row)
    policy = policy_for(row.tool)
    if decision == Decision.RETRY_SAME_KEY and policy.execute is None:
        raise InvalidDecision(f"{row.tool} has no execute hook: a retry cannot be sent")
    if decision == Decision.COMPENSATE and policy.compensate is None:
        raise InvalidDecision(f"{row.tool} has no compensate hook")
    with owning(row.run_id) as owner:
        row = call_row(pk)
        _check_version(row, seen_version)
        _check_decidable(row)
        decided = NewEvent(
            "approval_decided",
            {
                **call_about(row),
                "approved": decision in (Decision.HAPPENED, Decision.RETRY_SAME_KEY, Decision.COMPENSATE),
                "by": who,
                "reason": reason,
                "decision": decision.value,
                "evidence_ref": evidence_ref,
            },
        )

        def write(events):
            owner.append(person_stamped(events, by))

        if decision == Decision.HAPPENED:
            content = {"recorded_by": who, "reason": reason, "evidence_ref": evidence_ref}
            write([decided, completion_event(row, content=content, source="operator"), resolved_event(row, "completed", by=who)])
        elif decision == Decision.NOT_HAPPENED:
            write([decided, resolved_event(row, "not_happened", by=who)])
        elif decision == Decision.ESCALATE:
            # The first reason (conflict, overdue, policy...) stays the call's reason: a person handing
            # it on does not change why it needed a person. The event says it is a re-escalation.
            again = bool(row.escalation_reason)
            first = row.escalation_reason or "escalated"
            ask = escalation_event(row, reason=first, question=f"{'re-escalated' if again else 'escalated'} by {who}: {reason}")
            ask.payload["escalated_by"] = who
            ask.payload["re_escalation"] = again
            write([decided, ask])
        elif decision == Decision.RETRY_SAME_KEY:
            retry_owned(owner, row, policy, row.attempts, write=write, rule=f"decided by {who}", by=who, extra_before=[decided])
        elif decision == Decision.COMPENSATE:
            write([decided])
            compensate_owned(owner, row, policy, row.attempts, write=write, rule=f"decided by {who}", by=who)
    return call_row(pk)

def _note(*, pk: int, by, text: str, action: str, seen_version: int | None = None, assignee: str | None = None) -> UncertainCall:
    row = call_row(pk)
    if seen_version is not None:
        _check_version(row, seen_version)
    with owning(row.run_id) as owner:
        row = call_row(pk)
        if seen_version is not None:
            _check_version(row, seen_version)
        payload = {**call_about(row), "by": person_name(by), "text": text, "action": action}
        if assignee:
            payload["assignee"] = assignee
        owner.append(person_stamped([NewEvent("operator_note", payload)], by))
    return call_row(pk)

def call_claim(*, pk: int, user, seen_version: int) -> UncertainCall:
    """Take the call: the queue shows who is on it. Recorded as an operator_note (action claim)."""
    who = person_name(user)
    return _note(pk=pk, by=user, text=f"{who} claimed the call", action="claim", seen_version=seen_version)

def call_assign(*, pk: int, user, assignee, seen_version: int) -> UncertainCall:
    who, to = person_name(user), person_name(assignee)
    return _note(pk=pk, by=user, text=f"{who} assigned the call to {to}", action="assign", seen_version=seen_version, assignee=to)

def call_release(*, pk: int, user, seen_version: int) -> UncertainCall:
    who = person_name(user)
    return _note(pk=pk, by=user, text=f"{who} released the call", action="release", seen_version=seen_version)

def call_note(*, pk: int, by, text: str) -> UncertainCall:
    """A person's note on the call, kept in the run's history (operator_note)."""
    if not isinstance(text, str) or not text.strip():
        raise RecoveryError("a note needs text")
    return _note(pk=pk, by=by, text=text.strip()[:4000], action="note")
