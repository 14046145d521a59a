"""An uncertain call as the recovery engine writes about it: loading it, and the events it appends for it
(escalations, completions, resolutions). Every module that writes to a call's run builds its events here.
"""

from __future__ import annotations

from typing import Any

from recovery.adapters import CallRef
from recovery.errors import CallNotFound, RecoveryError
from recovery.models import UncertainCall
from recovery.projection import in_flight_call_get
from runs.fold import format_ts
from reckon_client.identity import signature
from runs.store import NewEvent

AUTOMATIC = "reckon-recovery"

def person_name(who) -> str:
    if who is None:
        raise RecoveryError("a person must be named")
    if isinstance(who, str):
        name = who.strip()
    else:
        name = who.get_username()
    if not name:
        raise RecoveryError("a person must be named")
    return name[:150]

def person_identity(who) -> dict:
    """A person's stable identity beside their name in what they write: the identity provider's
    issuer and subject (``by_issuer``, ``by_subject``), which a renamed person keeps; {} for a local
    user or a name given as text. Read through the user's ``reckon_identity`` (access.models
    PersonIdentity, written at sign-in by access.oidc): access sits above recovery, so it is reached
    by the relation's name rather than imported."""
    identity = None if who is None or isinstance(who, str) else getattr(who, "reckon_identity", None)
    return {"by_issuer": identity.issuer, "by_subject": identity.subject} if identity is not None else {}


def person_stamped(events: list[NewEvent], who) -> list[NewEvent]:
    """``events`` with ``who``'s stable identity added to each one whose ``by`` names them: the one
    place a person's decisions, claims and notes get it (recovery.decisions appends through it)."""
    extra = person_identity(who)
    if extra:
        name = person_name(who)
        for event in events:
            if event.payload.get("by") == name:
                event.payload.update(extra)
    return events


def call_row(pk) -> UncertainCall:
    """The call ``pk``: a full row, or a call in flight kept in the narrow table (which is never
    decidable: it is read only to be refused with its reason). CallNotFound when neither."""
    try:
        return UncertainCall.objects.get(pk=pk)
    except (UncertainCall.DoesNotExist, ValueError, TypeError):
        row = in_flight_call_get(pk=pk)
        if row is None:
            raise CallNotFound(pk) from None
        return row

def call_ref(row: UncertainCall) -> CallRef:
    return CallRef(row.run_id, row.call_id, row.idempotency_key, row.tool, row.arguments, row.start_seq)

def call_about(row: UncertainCall) -> dict:
    return {"call_id": row.call_id, "idempotency_key": row.idempotency_key, "start_seq": row.start_seq}

def escalation_event(row: UncertainCall, *, reason: str, question: str, evidence: dict | None = None, last_error: str = "") -> NewEvent:
    # What a person needs to decide without guessing (docs/recovery.md, "The rules"): the intended
    # payload, when it started, its key, and the last transport error. "Try again?" would hide that "again" may be "twice".
    return NewEvent(
        "approval_requested",
        {
            **call_about(row),
            "question": question,
            "reason": reason,
            "tool": row.tool,
            "arguments": row.arguments,
            "started_at": format_ts(row.started_at),
            "last_error": last_error or row.last_error,
            "evidence": evidence,
        },
    )

def completion_event(row: UncertainCall, *, content: Any, source: str, is_error: bool = False, extra: dict | None = None) -> NewEvent:
    return NewEvent(
        "tool_call_completed",
        {
            "call_id": row.call_id,
            "name": row.tool,
            "content": content,
            "is_error": is_error,
            # A proven failure occupies no key (docs/architecture.md, The fold): it may be attempted again.
            "idempotency_key": None if is_error else row.idempotency_key,
            "signature": signature(row.tool, row.arguments),
            "source": source,
            "start_seq": row.start_seq,
            **(extra or {}),
        },
    )

def resolved_event(row: UncertainCall, disposition: str, *, rule: str | None = None, by: str | None = None) -> NewEvent:
    payload = {**call_about(row), "disposition": disposition}
    if by:
        payload["by"] = by
    if rule:
        payload["rule"] = rule
    return NewEvent("tool_call_resolved", payload)

def approval_close_events(row: UncertainCall, *, decision: str, reason: str) -> list[NewEvent]:
    """An automatic resolution answers a pending escalation, so the run does not wait for nobody."""
    if not row.approval_pending:
        return []
    return [
        NewEvent(
            "approval_decided",
            {**call_about(row), "approved": decision != "not_happened", "by": AUTOMATIC, "reason": reason, "decision": decision},
        )
    ]
