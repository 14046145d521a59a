"""Who a call may be handed to: one rule for the console's single and bulk actions and the API.

A call is assigned or escalated to a person so that they decide it; handing it to someone who
cannot (an unknown or inactive user, or a role without the decide permission) would leave it with
nobody. The rule is checked before anything is written.
"""

from __future__ import annotations

from django.contrib.auth import get_user_model

from access.roles import perm
from recovery import decisions
from recovery.errors import RecoveryError
from recovery.models import Decision, UncertainCall


class NotAssignable(RecoveryError):
    """The named person may not be handed a call; the message names them and says why."""


def assignee_check(name) -> object:
    """The active user called ``name`` whose role can decide calls; otherwise ``NotAssignable``."""
    name = (name or "").strip() if isinstance(name, str) else ""
    if not name:
        raise NotAssignable("name the person to hand the call to")
    user = get_user_model().objects.filter(username=name).first()
    if user is None:
        raise NotAssignable(f"there is no user {name[:150]!r} to hand the call to")
    if not user.is_active:
        raise NotAssignable(f"user {name!r} is inactive and cannot be handed a call")
    if not (user.is_superuser or user.has_perm(perm("decide_call"))):
        raise NotAssignable(f"user {name!r} cannot decide calls (their role has no decide permission), so the call cannot be handed to them")
    return user


def may_hold_calls(user) -> bool:
    """Whether a call can ever be ``user``'s: they claim it (claim_call) or it is handed to them
    (decide_call, as ``assignee_check`` asks). The console offers "Mine" only to them; for anyone
    else it would always be empty."""
    return user.is_active and (user.has_perm(perm("claim_call")) or user.has_perm(perm("decide_call")))


def call_assign(*, pk: int, user, assignee: str, seen_version: int) -> UncertainCall:
    """Assign the call to ``assignee`` once they pass ``assignee_check``."""
    to = assignee_check(assignee)
    return decisions.call_assign(pk=pk, user=user, assignee=to, seen_version=seen_version)


def call_escalate(*, pk: int, by, reason: str, seen_version: int, assignee: str | None = None) -> UncertainCall:
    """Escalate the call, and hand it to ``assignee`` if one is named; the assignee is checked
    before the escalation is written, so a refused name writes nothing."""
    to = assignee_check(assignee) if assignee else None
    row = decisions.decision_record(pk=pk, decision=Decision.ESCALATE, by=by, reason=reason, seen_version=seen_version)
    if to is not None:
        row = decisions.call_assign(pk=pk, user=by, assignee=to, seen_version=row.version)
    return row
