"""Console-only writes. Decisions, claims and notes are the recovery engine's; the console itself
writes only the access record of a reveal or an unmasked export, through the one service both front
ends use (access.services), before the value is shown."""

from __future__ import annotations

from access.assignment import NotAssignable, assignee_check, call_assign
from access.models import AccessRecord
from access.services import access_record_write
from access.tokens import principal_for_user
from recovery.decisions import call_claim, decision_record
from recovery.errors import RecoveryError, StaleDecision
from recovery.masking import NEVER_REVEALED, value_at
from recovery.models import Decision
from runs.json_strict import json_problem
from runs.models import Event

REASON_MAX = 500


class RevealRefused(Exception):
    """The field named is not there or is not masked, or no reason was given; the message says which."""


def sensitive_reveal(*, user, run_id: str, seq: int, path: str, reason: str, fields: frozenset[str]) -> object:
    """The unmasked value at ``path`` of event ``seq``, recording who revealed it and why before
    returning it. The record is written first: if it cannot be written, the value is not shown."""
    ev = Event.objects.filter(run_id=run_id, seq=seq).only("payload").first()
    if ev is None:
        raise RevealRefused(f"run {run_id!r} has no event {seq}")
    leaf = path.rsplit(".", 1)[-1]
    if leaf in NEVER_REVEALED:
        raise RevealRefused(f"{path} is the run's key secret, which only the run's own agents read; it is never revealed")
    if leaf not in fields:
        raise RevealRefused(f"{path} is not a sensitive field")
    try:
        value = value_at(ev.payload, path)
    except KeyError:
        raise RevealRefused(f"event {seq} has no field {path}") from None
    # The field is checked first: a field that may never be revealed is refused as such, reason or not.
    reason = (reason or "").strip()
    if not reason:
        raise RevealRefused(f"say why you need to see {path or 'this field'}: the reason is kept in the access record")
    if len(reason) > REASON_MAX:
        raise RevealRefused(f"the reason has {len(reason)} characters; at most {REASON_MAX}")
    problem = json_problem(reason, "reason")  # NUL or a lone surrogate: it could not be kept as typed
    if problem is not None:
        raise RevealRefused(str(problem))
    access_record_write(who=principal_for_user(user), front_end=AccessRecord.FrontEnd.CONSOLE, run_id=run_id, seq=seq, fields=[path], why=reason)
    return value


REVEAL_SIDES = ("intended", "observed")


def call_reveal_where(*, call, side: str, field: str, conflict_seq: int | None) -> tuple[int, str]:
    """The event and path holding one side of a call's field: what the agent intended (its start's
    arguments) or what the receiver holds (the latest conflicting lookup's observed operation)."""
    if side == "intended":
        return call.start_seq, f"arguments.{field}"
    if side == "observed" and conflict_seq is not None:
        return conflict_seq, f"evidence.observed.{field}"
    raise RevealRefused(f"side must be one of {', '.join(REVEAL_SIDES)}" + (" (observed: only after a conflicting lookup)" if side == "observed" else f", got {side!r}"))


def export_record(*, user, run_id: str, route: str, upto: int, digest_url: str) -> None:
    """An unmasked export shows every sensitive value of the run at once: recorded as such, before
    the first byte, with the address asked, the events it holds, and where the file's digest is
    computed (the file streams, so its digest exists only after the last byte)."""
    why = f"GET {route} (seq 1..{upto}, sha256 at {digest_url})"
    access_record_write(who=principal_for_user(user), front_end=AccessRecord.FrontEnd.EXPORT, run_id=run_id, all_fields=True, why=why)


# --- bulk actions ----------------------------------------------------------------------------
#
# A bulk action is a preview (what will happen to each call, and why some will be skipped) and then
# an application call by call, each through the same recovery service a single decision uses, so a
# rule is never restated here. Each call is applied against the version the preview showed: a call
# that changed in between is reported as such and left alone. Retry is deliberately not a bulk
# action: for an irreversible call "again" may mean "twice", and that is a one-call decision.

BULK_LIMIT = 500


def _bulk_plan_one(row, *, action: str, user) -> tuple[bool, str]:
    # What may be decided is the model's rule (the one decision_record enforces); claims and
    # assignments follow it too: a call nobody may decide has nothing to hand over.
    why = row.decidable()
    if why is not None:
        return False, why
    if action == "claim":
        if row.claimed_by_name == user.get_username():
            return False, "already yours"
        return True, f"claim for {user.get_username()}" + (f" (taking it from {row.claimed_by_name})" if row.claimed_by_name else "")
    if action == "assign":
        return True, "assign"
    if action == "escalate":
        return True, "escalate with your reason"
    if action == "happened":
        if row.last_outcome != "match":
            return False, f"no matching evidence (last lookup: {row.last_outcome or 'none yet'}): decide it on its own screen"
        return True, f"record that it happened, citing reconciliation attempt {row.attempts} (a match)"
    return False, f"unknown action {action!r}"


def _assignee_refusal(action: str, assignee: str) -> str | None:
    # The same rule as a single assignment (access.assignment), checked once for the whole batch.
    if action != "assign":
        return None
    try:
        assignee_check(assignee)
    except NotAssignable as exc:
        return str(exc)
    return None


def bulk_preview(*, rows, action: str, user, assignee: str = "") -> list[dict]:
    """What ``action`` would do to each call: ``{call, ok, what}``; nothing is written."""
    out = []
    refused = _assignee_refusal(action, assignee)
    for row in rows:
        ok, what = _bulk_plan_one(row, action=action, user=user)
        if ok and refused:
            ok, what = False, refused
        if ok and action == "assign":
            what = f"assign to {assignee}"
        out.append({"call": row, "ok": ok, "what": what})
    return out


def bulk_apply(*, rows, seen: dict[int, int], action: str, user, assignee: str = "", reason: str = "") -> list[dict]:
    """Apply ``action`` call by call; ``{call, ok, status, result}`` per call (status: done, skipped or not applied; result: what, or why not). One refusal stops nothing."""
    out = []
    refused = _assignee_refusal(action, assignee)
    for row in rows:
        ok, what = _bulk_plan_one(row, action=action, user=user)
        if ok and refused:
            ok, what = False, refused
        version = seen.get(row.pk)
        if not ok:
            out.append({"call": row, "ok": False, "status": "skipped", "result": what})
            continue
        if version is None:
            out.append({"call": row, "ok": False, "status": "skipped", "result": "not in the preview you confirmed"})
            continue
        try:
            if action == "claim":
                call_claim(pk=row.pk, user=user, seen_version=version)
            elif action == "assign":
                call_assign(pk=row.pk, user=user, assignee=assignee, seen_version=version)
            elif action == "escalate":
                decision_record(pk=row.pk, decision=Decision.ESCALATE, by=user, reason=reason, seen_version=version)
            elif action == "happened":
                decision_record(
                    pk=row.pk, decision=Decision.HAPPENED, by=user, reason=reason, seen_version=version,
                    evidence_ref=f"reconciliation attempt {row.attempts} of call {row.pk}: match",
                )
            out.append({"call": row, "ok": True, "status": "done", "result": what})
        except StaleDecision:
            out.append({"call": row, "ok": False, "status": "not applied", "result": "the call changed since the preview"})
        except RecoveryError as exc:
            out.append({"call": row, "ok": False, "status": "not applied", "result": str(exc)})
    return out
