"""Notification channels and routes (configuration), and the outbox of notifications to deliver.

``Channel`` and ``Route`` are configuration loaded from a TOML file (``notify.config``); every load
leaves a ``ConfigChange`` with who, when and the configuration before and after, secrets masked.

``Notification`` is the transactional outbox: a row is written in the same transaction as the event
that causes it (``notify.outbox.outbox_project``, a projector of the append path) or by the timer
that climbs the escalation levels (``notify.escalation``), and is then delivered by a worker.
``delivery_id`` is chosen when the row is written and never changes: every attempt sends it (the
``webhook-id`` header, the e-mail's Message-ID), so a receiver that got an attempt whose answer was
lost recognises the retry. ``logical_key`` names the notification's cause (an event of a run, or a
level of an escalation episode), so writing it twice writes one row. ``DeliveryAttempt`` keeps
every attempt: when, how long, the status code or the error.
"""

from __future__ import annotations

import uuid

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

CHANNEL_KINDS = ("webhook", "slack", "pagerduty", "email")
NOTIFICATION_TYPES = ("call.escalated", "call.overdue", "call.acknowledged", "call.resolved", "digest.overdue")


def delivery_id_new() -> str:
    return f"msg_{uuid.uuid4().hex}"


class Channel(models.Model):
    name = models.CharField(max_length=100, unique=True)
    kind = models.CharField(max_length=16, choices=[(k, k) for k in CHANNEL_KINDS])
    config = models.JSONField(default=dict)  # url, secret, to, routing_key: as the file gave them

    class Meta:
        db_table = "reckon_notify_channel"
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.kind})"


class Route(models.Model):
    position = models.IntegerField(unique=True)  # the file's order: the first matching route applies
    risk_class = models.JSONField(null=True)  # list of names, or null for any
    tool = models.JSONField(null=True)
    tenant = models.JSONField(null=True)
    levels = models.JSONField(default=list)  # [{"notify": [channel names], "after_s": seconds}, ...]
    repeat_s = models.IntegerField(null=True)
    digest = models.JSONField(null=True)  # {"notify": [...], "at": "08:00", "timezone": "Europe/London"}

    class Meta:
        db_table = "reckon_notify_route"
        ordering = ["position"]


class ConfigChange(models.Model):
    at = models.DateTimeField(db_default=Now())
    by = models.CharField(max_length=150)
    source = models.CharField(max_length=300, blank=True, default="")
    summary = models.TextField(blank=True, default="")
    before = models.JSONField(null=True)  # secrets masked
    after = models.JSONField(null=True)

    class Meta:
        db_table = "reckon_notify_config_change"
        ordering = ["-at", "-id"]


class Notification(models.Model):
    class State(models.TextChoices):
        PENDING = "pending"
        DELIVERED = "delivered"
        DEAD = "dead"  # every attempt allowed failed: kept, shown, counted, never dropped

    id = models.BigAutoField(primary_key=True)
    # Unique by constraints (Meta) rather than ``unique=True``: on PostgreSQL that also built a
    # second, pattern-matching index per column, which no query uses and every escalation's rows
    # paid for (four more index entries per escalation with two channels).
    delivery_id = models.CharField(max_length=64, default=delivery_id_new)
    logical_key = models.CharField(max_length=400)
    type = models.CharField(max_length=32)
    action = models.CharField(max_length=16, default="trigger")  # trigger | acknowledge | resolve (PagerDuty's words)
    channel = models.CharField(max_length=100)
    kind = models.CharField(max_length=16)
    call_pk = models.BigIntegerField(null=True)  # the UncertainCall; null for a digest
    run_id = models.CharField(max_length=200, blank=True, default="")
    tenant = models.CharField(max_length=200, blank=True, default="")
    event_seq = models.BigIntegerField(null=True)  # the event that caused it, when one did
    episode_seq = models.BigIntegerField(null=True)  # the escalation (or release) its climb counts from
    episode_at = models.DateTimeField(null=True)
    level = models.IntegerField(default=0)  # 0-based index into the route's levels
    repeat = models.IntegerField(default=0)
    extra = models.JSONField(default=dict)  # what the cause adds to the message (reason, who acknowledged...)
    cause_at = models.DateTimeField(null=True)  # when the cause happened: the message's timestamp
    # {"type", "timestamp", "data"}, masked: rendered at the first attempt (not in the append's
    # transaction, which only records the cause) and kept, so every retry sends the same bytes.
    body = models.JSONField(null=True)
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    attempts = models.IntegerField(default=0)
    next_attempt_at = models.DateTimeField(db_default=Now())
    locked_until = models.DateTimeField(null=True)
    created_at = models.DateTimeField(db_default=Now())
    delivered_at = models.DateTimeField(null=True)
    last_error = models.TextField(blank=True, default="")

    class Meta:
        db_table = "reckon_notify_notification"
        ordering = ["id"]
        indexes = [
            models.Index(fields=["next_attempt_at"], name="reckon_notify_pending", condition=Q(state="pending")),
            models.Index(fields=["call_pk", "id"], name="reckon_notify_call"),
            # The call's current episode, read by the projector on every escalation it writes for.
            models.Index(fields=["call_pk", "episode_seq"], name="reckon_notify_call_episode", condition=Q(action="trigger")),
        ]
        constraints = [
            models.UniqueConstraint(fields=["delivery_id"], name="reckon_notify_delivery_id_uniq"),
            models.UniqueConstraint(fields=["logical_key"], name="reckon_notify_logical_key_uniq"),
        ]

    def __str__(self) -> str:
        return f"{self.delivery_id} {self.type} -> {self.channel} ({self.state})"


class DeliveryAttempt(models.Model):
    notification = models.ForeignKey(Notification, on_delete=models.CASCADE, related_name="delivery_attempts")
    number = models.IntegerField()
    at = models.DateTimeField()
    duration_ms = models.FloatField()
    status_code = models.IntegerField(null=True)
    error = models.TextField(blank=True, default="")
    ok = models.BooleanField(default=False)

    class Meta:
        db_table = "reckon_notify_attempt"
        ordering = ["notification_id", "number"]
