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
    # Who acquired the current epoch (runs.leases): the API caller's stable key ("token:<id>" or
    # "user:<id>", access.tokens.Principal.owner), "" for Reckon's own writers (recovery, the
    # importer, commands). Kept when the lease is released, so an epoch always names its owner;
    # renewal, release and append through the API are refused to anyone else.
    lease_owner = models.CharField(max_length=200, blank=True, default="", db_default="")
    # The hash chain's head (runs/chain.py): the hash of event ``last_seq``, moved by the append's
    # fence in the same statement. NULL with last_seq > 0: a run recorded before the chain existed,
    # until ``manage.py chain_backfill`` has chained it (appends leave it NULL until then).
    head = models.BinaryField(null=True, blank=True, editable=False)
    # How many of the run's first events were chained by chain v2 (each linked by its digest, from
    # the v2 genesis), before this database was upgraded to chain v3; 0 for a run chained wholly by
    # v3 (NULL). Set once by migration 0011, never changed after (docs/evidence.md).
    chain_v2_upto = models.BigIntegerField(null=True, blank=True, editable=False)
    # The run's tool calls in flight that nothing else has happened to, as the uncertain-call
    # projection keeps them (recovery/projection.py; read through the ``InFlightCall`` view): call
    # id -> {"s": start seq, "i": id, "c": call id, "k": key, "t": tool, "n": tenant, "a": started
    # at, "e": epoch} (a later start of a call id already in flight under "call id#seq").
    # NULL when there are none. On this row because the append's fence rewrites the row anyway: a
    # start and its completion change it in their own statements and add no row or index entry.
    in_flight = models.JSONField(null=True, blank=True, editable=False)
    # The bytes of the run's payloads as stored (UTF-8 JSON, keys sorted), moved by the append's
    # fence in the same statement as last_seq: the run's size limit (RECKON_MAX_RUN_BYTES) is one
    # comparison on the row the fence locks anyway, never a scan of the log.
    payload_bytes = models.BigIntegerField(default=0, db_default=0, editable=False)

    class Meta:
        db_table = "reckon_run"
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.run_id


class AppendOnlyError(RuntimeError):
    pass


class LogJSONField(models.JSONField):
    """A JSON payload kept exactly as it was written.

    On PostgreSQL the column is ``json``, not ``jsonb``: the text is stored verbatim, so an append
    does not parse it into a binary tree and a replay does not serialise it back (both were the
    largest single costs of the append and replay paths). Nothing filters on the log's payloads with
    jsonb-only operators (``?``, ``@>``); the few lookups that read a payload field use ``->>``, which
    ``json`` has too (see ``console.decision_log.decisions_search``). Elsewhere it is Django's JSONField.
    """

    def db_type(self, connection):
        if connection.vendor == "postgresql":
            return "json"
        return super().db_type(connection)

    def from_db_value(self, value, expression, connection):
        if value is None or not isinstance(value, (str, bytes, bytearray)):
            return value  # psycopg decodes a json column itself
        return super().from_db_value(value, expression, connection)

    def get_db_prep_value(self, value, connection, prepared=False):
        if connection.vendor == "postgresql" and value is not None and not hasattr(value, "as_sql"):
            from psycopg.types.json import Json

            return Json(value)
        return super().get_db_prep_value(value, connection, prepared)


class Event(models.Model):
    # The primary key is (run, seq): the one index an append maintains, and the order every replay
    # reads. No foreign key constraint to the run: the append's fence updates that very run row in
    # the same statement, so an event of an unknown run cannot be written, and runs are never
    # deleted (PROTECT, in code); the constraint's per-row check was a fifth of a single append.
    pk = models.CompositePrimaryKey("run", "seq")
    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="events", db_column="run_id", db_index=False, db_constraint=False)
    seq = models.BigIntegerField()
    type = models.CharField(max_length=64)
    v = models.PositiveSmallIntegerField(help_text="schema version the event was written with")
    ts = models.DateTimeField(help_text="when it happened, by the writer's clock")
    payload = LogJSONField()
    epoch = models.BigIntegerField(help_text="the writer's lease epoch")
    recorded_at = models.DateTimeField(db_default=Now())
    # sha256(previous hash || canonical bytes of this event), written by the append (runs/chain.py).
    # NULL on events stored before the chain existed: theirs are in EventHash.
    hash = models.BinaryField(null=True, blank=True, editable=False)

    class Meta:
        db_table = "reckon_event"
        ordering = ["run_id", "seq"]

    def save(self, *args, **kwargs):
        raise AppendOnlyError("events are written only by runs.store.events_append")

    def delete(self, *args, **kwargs):
        raise AppendOnlyError("events are append-only and cannot be deleted")

    def __str__(self) -> str:
        return f"{self.run_id}#{self.seq} {self.type}"


class EventHash(models.Model):
    """The chain hash of an event stored before the chain existed, written by ``chain_backfill``.

    A side table, so the event table itself stays append-only: no row of it is ever updated.
    """

    pk = models.CompositePrimaryKey("run_id", "seq")
    run_id = models.CharField(max_length=200)
    seq = models.BigIntegerField()
    hash = models.BinaryField()

    class Meta:
        db_table = "reckon_event_hash"


class EventSeal(models.Model):
    """The salts of an event's sealed values (runs/canonical.py), written with the event.

    ``salts`` maps each sealed value's JSON Pointer in the payload to its 16 random bytes in hex.
    The chain covers each value as sha256(salt || canonical value), so an evidence bundle may show
    the commitment instead of the value and still verify. Kept beside the event table, so that
    table's rows keep exactly their shape; changing or removing a row here breaks the chain.
    """

    pk = models.CompositePrimaryKey("run_id", "seq")
    run_id = models.CharField(max_length=200)
    seq = models.BigIntegerField()
    salts = models.TextField()

    class Meta:
        db_table = "reckon_event_seal"


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


# --- snapshots: a cache of a partial fold, never a source of truth -----------------------------


class Snapshot(models.Model):
    """The folded state of a run after ``seq``, serialised, with the fold version that produced it.

    Rows are only ever added (and pruned, oldest first): a new snapshot never overwrites the one it
    replaces, so a crash while writing leaves the previous one intact. The body holds only fields
    derived from the run's events, so it needs no retention or access rule the log does not already
    have. ``discarded_at`` marks a snapshot that failed a check on load; it is kept for diagnosis
    and never loaded again.
    """

    id = models.BigAutoField(primary_key=True)
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="snapshots", db_column="run_id")
    seq = models.BigIntegerField(help_text="the last event folded into the body")
    fold_version = models.PositiveIntegerField(help_text="runs.snapshots.FOLD_VERSION of the writer")
    fold_code = models.CharField(max_length=16, help_text="digest of the fold's source that wrote it")
    body = models.TextField(help_text="the serialised RunState, JSON")
    digest = models.CharField(max_length=64, help_text="sha256 of the body's UTF-8 bytes, hex")
    created_at = models.DateTimeField(db_default=Now())
    discarded_at = models.DateTimeField(null=True, blank=True)
    discard_reason = models.CharField(max_length=300, blank=True, default="")

    class Meta:
        db_table = "reckon_snapshot"
        indexes = [models.Index(fields=["run", "seq"], name="reckon_snapshot_run_seq")]
        ordering = ["run_id", "-seq", "-id"]

    def __str__(self) -> str:
        return f"{self.run_id}@{self.seq} (v{self.fold_version})"


class SnapshotPointer(models.Model):
    """Which snapshot of a run is current. Published only in the transaction that wrote the body.

    ``snapshot_id`` is deliberately a plain integer, not a foreign key: an operator may delete every
    snapshot by any means (ORM, SQL, TRUNCATE) and a dangling pointer is then simply a cache miss.
    A foreign key would turn the deletion of a cache into an integrity error.
    """

    run = models.OneToOneField(Run, on_delete=models.CASCADE, primary_key=True, db_column="run_id", related_name="snapshot_pointer")
    snapshot_id = models.BigIntegerField()
    published_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "reckon_snapshot_pointer"


class SnapshotPolicy(models.Model):
    """A run's own snapshot interval; runs without a row use the defaults in settings."""

    run = models.OneToOneField(Run, on_delete=models.CASCADE, primary_key=True, db_column="run_id", related_name="snapshot_policy")
    interval = models.PositiveIntegerField(null=True, blank=True, help_text="events between snapshots; empty: never snapshot")
    min_events = models.PositiveIntegerField(default=2000, help_text="no snapshot while the run is shorter than this")

    class Meta:
        db_table = "reckon_snapshot_policy"


class SnapshotQuarantine(models.Model):
    """A snapshot version that disagreed with a full replay: no snapshot of it is loaded or written."""

    fold_version = models.PositiveIntegerField()
    fold_code = models.CharField(max_length=16)
    reason = models.TextField()
    at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "reckon_snapshot_quarantine"
        constraints = [models.UniqueConstraint(fields=["fold_version", "fold_code"], name="reckon_snapshot_quarantine_uniq")]


class RunTenant(models.Model):
    """A read model kept by a projector inside every append's transaction (runs.tenants): the
    tenants a run's events name. Token tenant limits are checked against it."""

    run_id = models.CharField(max_length=200)
    tenant = models.CharField(max_length=200)

    class Meta:
        db_table = "reckon_run_tenant"
        constraints = [models.UniqueConstraint(fields=["run_id", "tenant"], name="reckon_run_tenant_uniq")]
        indexes = [models.Index(fields=["tenant", "run_id"], name="reckon_run_tenant_by_tenant")]


class RunImport(models.Model):
    """An epoch under which the importer wrote a run's events (runs.importer): the events of that
    epoch arrived by import, a recorded history, not by its agent or by Reckon. The run screen marks
    them. Written in the import's own transaction, never changed; not operational telemetry like
    ``LeaseRecord``, so it has no retention of its own."""

    pk = models.CompositePrimaryKey("run_id", "epoch")
    run_id = models.CharField(max_length=200)
    epoch = models.BigIntegerField()
    source_file = models.CharField(max_length=500, blank=True, default="")
    at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "reckon_run_import"
