"""Storage of runs, their append-only events, and the operational lease log.

Rows of ``Event`` are written only by ``runs.store.events_append`` and never changed: ``save`` on an
existing row and ``delete`` raise, and on PostgreSQL a trigger rejects UPDATE and DELETE outright.
``Run`` carries the write fence (last seq, lease epoch, holder, expiry) that every append checks in
the same statement that inserts. ``LeaseRecord`` is operational telemetry (acquisitions, takeovers,
releases, fencing rejections): it has its own retention and never enters the semantic log.
"""

from __future__ import annotations

from django.db import models
from django.db.models.functions import Now


class Run(models.Model):
    class Origin(models.TextChoices):
        LIVE = "live", "written live"
        IMPORT = "import", "imported from a file"

    run_id = models.CharField(max_length=200, primary_key=True)
    origin = models.CharField(max_length=16, choices=Origin.choices, default=Origin.LIVE)
    source_file = models.CharField(max_length=500, blank=True, default="")
    created_at = models.DateTimeField(db_default=Now())
    last_seq = models.BigIntegerField(default=0)
    finished_seq = models.BigIntegerField(null=True, blank=True)
    lease_epoch = models.BigIntegerField(default=0)
    lease_holder = models.CharField(max_length=200, blank=True, default="")
    lease_expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "reckon_run"
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.run_id


class AppendOnlyError(RuntimeError):
    pass


class Event(models.Model):
    id = models.BigAutoField(primary_key=True)
    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="events", db_column="run_id")
    seq = models.BigIntegerField()
    type = models.CharField(max_length=64)
    v = models.PositiveSmallIntegerField(help_text="schema version the event was written with")
    ts = models.DateTimeField(help_text="when it happened, by the writer's clock")
    payload = models.JSONField()
    epoch = models.BigIntegerField(help_text="the writer's lease epoch")
    recorded_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "reckon_event"
        constraints = [models.UniqueConstraint(fields=["run", "seq"], name="reckon_event_run_seq_uniq")]
        ordering = ["run_id", "seq"]

    def save(self, *args, **kwargs):
        raise AppendOnlyError("events are written only by runs.store.events_append")

    def delete(self, *args, **kwargs):
        raise AppendOnlyError("events are append-only and cannot be deleted")

    def __str__(self) -> str:
        return f"{self.run_id}#{self.seq} {self.type}"


class LeaseRecord(models.Model):
    class Kind(models.TextChoices):
        ACQUIRED = "acquired"
        TAKEOVER = "takeover"
        RELEASED = "released"
        REFUSED = "refused"  # an acquisition refused because another holder's lease is live
        FENCED = "fenced"  # an append or renewal rejected for a stale epoch or a seq conflict

    run_id = models.CharField(max_length=200, db_index=True)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    epoch = models.BigIntegerField()
    holder = models.CharField(max_length=200, blank=True, default="")
    detail = models.TextField(blank=True, default="")
    at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "reckon_lease_record"
        ordering = ["-at", "-id"]
