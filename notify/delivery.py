"""Delivering one notification: claim it, send it on its channel, record the attempt.

The row is claimed with a conditional update (pending, and not claimed by another worker within
its lock), so two workers handed the same row do not send it at once. The send happens outside any
transaction: a worker that dies after the receiver accepted and before the attempt is recorded
leaves the row pending, and the next claim sends it again with the same ``delivery_id``, which the
receiver deduplicates on. A notification is never dropped: after ``RECKON_NOTIFY_MAX_ATTEMPTS``
failed attempts it is kept as a dead letter, shown in the console and counted in /metrics.

A failure of one channel touches only its own rows: every row is delivered by its own task.
"""

from __future__ import annotations

import json
import random
import time
from datetime import datetime, timedelta

from django.conf import settings
from django.core.mail import EmailMessage
from django.db import transaction
from django.db.models import Q
from django.utils import timezone as djtz
from standardwebhooks.webhooks import Webhook

from notify.models import Channel, DeliveryAttempt, Notification
from notify.outbox import notification_body
from notify.summary import TYPE as SUMMARY_TYPE
from notify.summary import summary_text
from recovery.adapters import http_request

N = Notification.State


def backoff_s(attempts: int) -> float:
    """Delay after the ``attempts``-th failure: doubling from the base, capped, with jitter (half to
    all of it) so that a receiver coming back is not met by every retry in the same second."""
    base = float(settings.RECKON_NOTIFY_BACKOFF_S)
    cap = float(settings.RECKON_NOTIFY_BACKOFF_MAX_S)
    full = min(cap, base * (2 ** max(0, attempts - 1)))
    return full * random.uniform(0.5, 1.0)


def _summary(body: dict) -> str:
    d = body.get("data", {})
    if body.get("type") == SUMMARY_TYPE:
        return summary_text(body)
    if body.get("type") == "digest.overdue":
        calls = d.get("calls", [])
        lines = [f"Reckon: {len(calls)} overdue irreversible call(s) for tenant {d.get('tenant')}"]
        lines += [f"- {c.get('tool')} run {c.get('run_id')} call {c.get('call_id')} deadline {c.get('deadline')} {c.get('url')}" for c in calls]
        return "\n".join(lines)
    words = {"call.escalated": "escalated", "call.overdue": "overdue", "call.acknowledged": "acknowledged", "call.resolved": "resolved"}
    head = f"Reckon: {d.get('risk_class')} call {words.get(body.get('type'), body.get('type'))}: {d.get('tool')} in run {d.get('run_id')} (call {d.get('call_id')})"
    facts = [f"reason: {d.get('reason') or '-'}", f"deadline: {d.get('deadline') or '-'}"]
    for k in ("acknowledged_by", "disposition", "resolved_by", "level", "repeat"):
        if d.get(k) not in (None, ""):
            facts.append(f"{k.replace('_', ' ')}: {d[k]}")
    return f"{head}\n{'; '.join(facts)}\n{d.get('url')}"


def _post(url: str, body: bytes, headers: dict) -> tuple[int, str]:
    status, data = http_request("POST", url, body=body, headers={"Content-Type": "application/json", "User-Agent": "reckon-notify", **headers}, timeout=settings.RECKON_NOTIFY_TIMEOUT_S)
    return status, "" if 200 <= status < 300 else f"HTTP {status}: {data[:200].decode('utf-8', 'replace')}"


def _send(n: Notification, channel: Channel, now: datetime) -> tuple[int | None, str]:
    """Send once; (status code or None, error text or "" on success)."""
    cfg = channel.config
    if channel.kind == "webhook":
        body = json.dumps(n.body, separators=(",", ":"), ensure_ascii=False)
        signature = Webhook(cfg["secret"]).sign(n.delivery_id, now, body)
        headers = {"webhook-id": n.delivery_id, "webhook-timestamp": str(int(now.timestamp())), "webhook-signature": signature}
        return _post(cfg["url"], body.encode(), headers)
    if channel.kind == "slack":
        return _post(cfg["url"], json.dumps({"text": _summary(n.body)}).encode(), {})
    if channel.kind == "pagerduty":
        d = n.body.get("data", {})
        event = {"routing_key": cfg["routing_key"], "event_action": n.action, "dedup_key": f"reckon-call-{n.call_pk}" if n.call_pk else n.delivery_id}
        if n.action == "trigger":
            event["payload"] = {
                "summary": _summary(n.body).splitlines()[0][:1024],
                "source": "reckon",
                "severity": "critical" if d.get("risk_class") == "irreversible" else "warning",
                "custom_details": d,
            }
            event["links"] = [{"href": d["url"], "text": "Reckon console"}] if d.get("url") else []
        return _post(cfg["url"], json.dumps(event).encode(), {})
    if channel.kind == "email":
        text = _summary(n.body)
        msg = EmailMessage(
            subject=text.splitlines()[0][:200],
            body=text,
            from_email=settings.DEFAULT_FROM_EMAIL,
            to=cfg["to"],
            headers={"Message-ID": f"<{n.delivery_id}@reckon>", "X-Reckon-Notification-Id": n.delivery_id},
        )
        msg.send(fail_silently=False)
        return None, ""
    return None, f"channel kind {channel.kind!r} cannot be delivered"


def notification_deliver(*, notification_id: int, now: datetime | None = None) -> float | None:
    """Make one delivery attempt of a pending, due notification. Returns the seconds until the next
    attempt when this one failed and another is allowed; None when there is nothing more to do
    (delivered, dead, not due, or another worker holds it)."""
    now = now or djtz.now()
    lock = timedelta(seconds=settings.RECKON_NOTIFY_LOCK_S)
    claimed = (
        Notification.objects.filter(pk=notification_id, state=N.PENDING, next_attempt_at__lte=now + timedelta(seconds=1))
        .filter(Q(locked_until__isnull=True) | Q(locked_until__lt=now))
        .update(locked_until=now + lock)
    )
    if claimed != 1:
        return None
    n = Notification.objects.get(pk=notification_id)
    if n.body is None:
        n.body = notification_body(n)
        Notification.objects.filter(pk=n.pk, body__isnull=True).update(body=n.body)
        n.body = Notification.objects.values_list("body", flat=True).get(pk=n.pk)  # whichever render was kept
    channel = Channel.objects.filter(name=n.channel).first()
    started = time.perf_counter()
    status, error = None, ""
    if channel is None:
        error = f"channel {n.channel!r} is no longer configured"
    else:
        try:
            status, error = _send(n, channel, djtz.now())  # the real time: receivers reject stale timestamps
        except Exception as exc:  # noqa: BLE001 a refused connection, a timeout, an SMTP error: recorded, retried
            error = f"{type(exc).__name__}: {exc}"[:500] or type(exc).__name__
    duration_ms = (time.perf_counter() - started) * 1000
    attempts = n.attempts + 1
    retry_in = None
    with transaction.atomic():
        DeliveryAttempt.objects.create(notification=n, number=attempts, at=now, duration_ms=duration_ms, status_code=status, error=error, ok=not error)
        fields = {"attempts": attempts, "locked_until": None, "last_error": error}
        if not error:
            fields.update(state=N.DELIVERED, delivered_at=djtz.now())
        elif attempts >= settings.RECKON_NOTIFY_MAX_ATTEMPTS or channel is None:
            fields.update(state=N.DEAD)
        else:
            retry_in = backoff_s(attempts)
            fields.update(next_attempt_at=now + timedelta(seconds=retry_in))
        Notification.objects.filter(pk=n.pk).update(**fields)
    return retry_in


def notifications_due(*, now: datetime | None = None, limit: int = 500) -> list[int]:
    """Pending notifications whose next attempt is due and that no worker holds: what beat's sweep
    hands to the workers (a lost enqueue, a worker killed mid-delivery, a retry's countdown lost)."""
    now = now or djtz.now()
    qs = Notification.objects.filter(state=N.PENDING, next_attempt_at__lte=now).filter(Q(locked_until__isnull=True) | Q(locked_until__lt=now))
    return list(qs.order_by("next_attempt_at", "id").values_list("id", flat=True)[:limit])
