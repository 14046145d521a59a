"""Read models and configuration of the recovery engine.

``UncertainCall`` is a projection: every column that states a fact is derived from the run's event
log by ``recovery.projection`` (incrementally, inside every append's transaction, and again from
scratch by ``projections_rebuild``), and from the tool's policy for the columns the policy decides
(risk class, deadline, safe-retry window). Nothing else writes it. ``version`` and ``updated_at``
are concurrency tokens, not facts: ``version`` rises on every change so a decision taken on a stale
screen can be refused.

``ToolPolicy`` is configuration (CONTRACTS section 4); every change to it leaves a ``PolicyChange``
with who, when, and the policy before and after. ``DemoLedgerEntry`` is the demo ledger adapter's
store, used by the quickstart.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

UNRESOLVED_STATES = ("open", "reconciling", "escalated")
RISK_CLASSES = ("read_only", "idempotent", "reversible", "irreversible")
STRATEGIES = ("provider_idempotency", "reconcile_then_retry", "escalate", "compensate")


class UncertainCall(models.Model):
    class State(models.TextChoices):
        IN_FLIGHT = "in_flight", "in flight"  # the writer's lease is live: it may still complete the call
        OPEN = "open", "open"  # uncertain, no reconciliation attempt yet
        RECONCILING = "reconciling", "reconciling"  # attempts made, no answer that settles it
        ESCALATED = "escalated", "escalated"  # waiting for a person
        RESOLVED = "resolved", "resolved"

    class Risk(models.TextChoices):
        READ_ONLY = "read_only"
        IDEMPOTENT = "idempotent"
        REVERSIBLE = "reversible"
        IRREVERSIBLE = "irreversible"

    id = models.BigAutoField(primary_key=True)
    run_id = models.CharField(max_length=200)
    call_id = models.CharField(max_length=200)
    idempotency_key = models.CharField(max_length=200, db_index=True)
    tool = models.CharField(max_length=200)
    arguments = models.JSONField(null=True)
    tenant = models.CharField(max_length=200, default="default")
    start_seq = models.BigIntegerField()
    started_at = models.DateTimeField()
    start_epoch = models.BigIntegerField(default=0)
    state = models.CharField(max_length=16, choices=State.choices, default=State.IN_FLIGHT)
    uncertain_seq = models.BigIntegerField(null=True, blank=True)
    uncertain_reason = models.CharField(max_length=200, blank=True, default="")
    # Policy-derived: recomputed whenever the tool's policy changes.
    risk_class = models.CharField(max_length=16, choices=Risk.choices, default=Risk.IRREVERSIBLE)
    unclassified = models.BooleanField(default=False)
    deadline = models.DateTimeField(null=True, blank=True)
    retry_window_closes_at = models.DateTimeField(null=True, blank=True)
    # Derived from later events of the run.
    possible_duplicate = models.BooleanField(default=False)
    disposition = models.CharField(max_length=32, blank=True, default="")
    resolved_by = models.CharField(max_length=200, blank=True, default="")
    resolved_seq = models.BigIntegerField(null=True, blank=True)
    resolution_kind = models.CharField(max_length=16, blank=True, default="")  # automatic | person | run
    last_outcome = models.CharField(max_length=16, blank=True, default="")
    last_rule = models.CharField(max_length=300, blank=True, default="")
    last_error = models.TextField(blank=True, default="")
    attempts = models.IntegerField(default=0)
    # How long the latest adapter lookup took (evidence.duration_ms of the latest attempt that ran
    # one), and how many attempts ended in each outcome: what /metrics exports as lookup latency
    # and reconciliation outcomes without scanning the event table.
    last_lookup_ms = models.FloatField(null=True, blank=True)
    outcomes_match = models.IntegerField(default=0)
    outcomes_absent = models.IntegerField(default=0)
    outcomes_conflict = models.IntegerField(default=0)
    outcomes_unavailable = models.IntegerField(default=0)
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    retry_seq = models.BigIntegerField(null=True, blank=True)  # a retry start with no result yet
    escalation_reason = models.CharField(max_length=32, blank=True, default="")  # conflict, policy, overdue, ...
    approval_pending = models.BooleanField(default=False)
    escalated_at = models.DateTimeField(null=True, blank=True)  # the first escalation, kept after resolution
    claimed_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    claimed_by_name = models.CharField(max_length=150, blank=True, default="")
    claimed_at = models.DateTimeField(null=True, blank=True)
    notes = models.IntegerField(default=0)
    last_seq = models.BigIntegerField(default=0)  # the last event of the run that changed this row
    version = models.IntegerField(default=1)
    updated_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "reckon_uncertain_call"
        constraints = [models.UniqueConstraint(fields=["run_id", "start_seq"], name="reckon_uncertain_run_start_uniq")]
        indexes = [
            # The queue reads each danger rank as a range in (started_at, id) order (see
            # recovery.selectors._danger_branches); partial indexes on the unresolved states hold only
            # the calls in doubt, so in-flight rows (most writes) and resolved history cost nothing.
            models.Index(fields=["started_at", "id"], name="reckon_uc_open_age", condition=Q(state__in=UNRESOLVED_STATES)),
            models.Index(fields=["risk_class", "started_at", "id"], name="reckon_uc_open_risk_age", condition=Q(state__in=UNRESOLVED_STATES), include=["escalated_at"]),
            models.Index(fields=["tenant", "started_at", "id"], name="reckon_uc_open_tenant_age", condition=Q(state__in=UNRESOLVED_STATES)),
            models.Index(fields=["tool", "started_at", "id"], name="reckon_uc_open_tool_age", condition=Q(state__in=UNRESOLVED_STATES)),
            models.Index(fields=["started_at", "id"], name="reckon_uc_dup_age", condition=Q(possible_duplicate=True)),
            # Overdue calls per risk class, most overdue first (the queue's rank 1, the overview).
            models.Index(fields=["risk_class", "deadline"], name="reckon_uc_open_deadline", condition=Q(state__in=UNRESOLVED_STATES)),
            # The overview's counts of settled calls and the chart's recently resolved ones.
            models.Index(fields=["risk_class", "resolution_kind"], name="reckon_uc_settled", condition=Q(state="resolved"), include=["escalated_at"]),
            models.Index(fields=["updated_at"], name="reckon_uc_settled_at", condition=Q(state="resolved")),
            models.Index(fields=["risk_class", "state", "started_at"], name="reckon_uc_risk"),
            models.Index(fields=["tool", "state"], name="reckon_uc_tool"),
            models.Index(fields=["tenant", "state"], name="reckon_uc_tenant"),
            models.Index(fields=["state", "deadline"], name="reckon_uc_deadline"),
            models.Index(fields=["state", "next_attempt_at"], name="reckon_uc_due"),
        ]
        ordering = ["-possible_duplicate", "started_at", "id"]

    def __str__(self) -> str:
        return f"{self.run_id}#{self.start_seq} {self.tool} ({self.state})"


class ToolPolicy(models.Model):
    """How one tool's uncertain calls are reconciled (CONTRACTS section 4)."""

    tool = models.CharField(max_length=200, unique=True)
    risk_class = models.CharField(max_length=16, choices=UncertainCall.Risk.choices)
    strategy = models.CharField(max_length=32, choices=[(s, s) for s in STRATEGIES])
    semantic_fields = models.JSONField(default=list, blank=True)
    deadline_s = models.PositiveIntegerField(default=900)
    key_retention_s = models.PositiveIntegerField(null=True, blank=True)
    sensitive_fields = models.JSONField(default=list, blank=True)
    lookup = models.JSONField(null=True, blank=True)
    execute = models.JSONField(null=True, blank=True)
    compensate = models.JSONField(null=True, blank=True)
    value_rules = models.JSONField(default=list, blank=True)
    source = models.JSONField(default=dict, blank=True, help_text="the policy as written (CONTRACTS section 4 table)")
    updated_at = models.DateTimeField(auto_now=True)
    updated_by = models.CharField(max_length=150, blank=True, default="")

    class Meta:
        db_table = "reckon_tool_policy"
        ordering = ["tool"]

    def __str__(self) -> str:
        return f"{self.tool}: {self.risk_class}, {self.strategy}"


class PolicyChange(models.Model):
    """One change to a tool's policy: who, when, and the policy before and after (null: none)."""

    tool = models.CharField(max_length=200, db_index=True)
    by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    by_name = models.CharField(max_length=150)
    at = models.DateTimeField(db_default=Now())
    source = models.CharField(max_length=32, default="edit")  # edit | file
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)

    class Meta:
        db_table = "reckon_policy_change"
        ordering = ["-at", "-id"]


class DemoLedgerEntry(models.Model):
    """An operation in the demo ledger: one row per idempotency key, as a receiver keeps it."""

    idempotency_key = models.CharField(max_length=200, unique=True)
    tool = models.CharField(max_length=200)
    fields = models.JSONField()
    result = models.JSONField(null=True)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "reckon_demo_ledger"
