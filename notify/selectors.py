"""Reads of the outbox for the console: the deliveries screen and the line on a call's screen."""

from __future__ import annotations

from django.db.models import Prefetch
from django.utils import timezone as djtz

from notify.models import DeliveryAttempt, Notification

STATES = tuple(Notification.State.values)


def deliveries_list(*, state: str | None = None, limit: int = 200) -> list[Notification]:
    """The latest notifications, newest first, each with its attempts (``attempts_shown``)."""
    qs = Notification.objects.order_by("-id")
    if state:
        qs = qs.filter(state=state)
    attempts = Prefetch("delivery_attempts", queryset=DeliveryAttempt.objects.order_by("number"), to_attr="attempts_shown")
    return list(qs.prefetch_related(attempts)[:limit])


def deliveries_counts() -> dict[str, int]:
    return {s: Notification.objects.filter(state=s).count() for s in STATES}


def _hhmm(ts) -> str:
    return djtz.localtime(ts).strftime("%H:%M") if ts else "?"


def call_paging_line(*, call_pk: int) -> str:
    """Who was paged about the call and who acknowledged, in a line: "paged: ops-webhook 14:02,
    oncall-mail 14:02; acknowledged by dana 14:09". Pending and dead deliveries say so; "" when the
    call caused no notification."""
    rows = list(Notification.objects.filter(call_pk=call_pk).order_by("id"))
    if not rows:
        return ""
    paged = []
    for n in rows:
        if n.action != "trigger":
            continue
        when = _hhmm(n.delivered_at) if n.state == Notification.State.DELIVERED else n.state
        paged.append(f"{n.channel}{' (repeat)' if n.repeat else ''} {when}")
    parts = [f"paged: {', '.join(paged)}"] if paged else []
    acks = {}
    for n in rows:
        if n.action == "acknowledge":
            acks.setdefault(n.event_seq, f"acknowledged by {n.extra.get('acknowledged_by', '?')} {_hhmm(n.created_at)}")
    parts += acks.values()
    resolved = [n for n in rows if n.action == "resolve"]
    if resolved:
        parts.append(f"resolve sent to {', '.join(n.channel for n in resolved)}")
    return "; ".join(parts)
