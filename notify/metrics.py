"""The notifications' figures for /metrics, read from the outbox on each scrape (api.metrics)."""

from __future__ import annotations

from django.db.models import Avg, Count, F, Max, Min
from django.utils import timezone as djtz
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from notify.models import DeliveryAttempt, Notification


def notify_families():
    attempts = CounterMetricFamily("reckon_notification_attempts", "Delivery attempts by channel and outcome (ok, failed)", labels=["channel", "outcome"])
    for row in DeliveryAttempt.objects.values("notification__channel", "ok").annotate(n=Count("id")).order_by():
        attempts.add_metric([row["notification__channel"], "ok" if row["ok"] else "failed"], row["n"])
    yield attempts
    states = GaugeMetricFamily("reckon_notifications", "Notifications in the outbox by channel and state (pending, delivered, dead)", labels=["channel", "state"])
    dead = GaugeMetricFamily("reckon_notifications_dead", "Dead letters: notifications every allowed attempt failed for", labels=["channel"])
    for row in Notification.objects.values("channel", "state").annotate(n=Count("id")).order_by():
        states.add_metric([row["channel"], row["state"]], row["n"])
        if row["state"] == Notification.State.DEAD:
            dead.add_metric([row["channel"]], row["n"])
    yield states
    yield dead
    oldest = Notification.objects.filter(state=Notification.State.PENDING).aggregate(at=Min("created_at"))["at"]
    yield GaugeMetricFamily(
        "reckon_notification_oldest_pending_age_seconds", "Age of the oldest notification not yet delivered (0: none)", value=(djtz.now() - oldest).total_seconds() if oldest else 0.0
    )
    latency = GaugeMetricFamily("reckon_notification_delivery_latency_seconds", "From written to delivered, over the last 1,000 deliveries", labels=["stat"])
    recent = Notification.objects.filter(state=Notification.State.DELIVERED).order_by("-id")[:1000].values_list("id", flat=True)
    agg = Notification.objects.filter(id__in=list(recent)).aggregate(mean=Avg(F("delivered_at") - F("created_at")), peak=Max(F("delivered_at") - F("created_at")))
    for stat in ("mean", "peak"):
        value = agg[stat]
        latency.add_metric([stat], value.total_seconds() if value is not None else 0.0)
    yield latency
