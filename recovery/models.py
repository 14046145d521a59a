"""Read models and configuration of the recovery engine.

``UncertainCall`` is a projection: every column that states a fact is derived from the run's event
log by ``recovery.projection`` (incrementally, inside every append's transaction, and again from
scratch by ``projections_rebuild``), and from the tool's policy for the columns the policy decides
(risk class, deadline, safe-retry window). Nothing else writes it. ``version`` and ``updated_at``
are concurrency tokens, not facts: ``version`` rises on every change so a decision taken on a stale
screen can be refused.

``ToolPolicy`` is configuration (docs/recovery.md, Policies); every change to it leaves a ``PolicyChange``
with who, when, and the policy before and after. ``DemoLedgerEntry`` is the demo ledger adapter's
store, used by the quickstart.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Now

# The states of a call in doubt that nobody has settled: the queue, its figures, "overdue" and the
# partial indexes below all mean these. Not in_flight (its writer may still complete it) and not
# resolved. The partial indexes' conditions are built from this tuple: changing it is a migration.
UNRESOLVED_STATES = ("open", "reconciling", "escalated")
RISK_CLASSES = ("read_only", "idempotent", "reversible", "irreversible")
STRATEGIES = ("provider_idempotency", "reconcile_then_retry", "escalate", "compensate")


class Decision(models.TextChoices):
    """What a person may decide about an uncertain call: the one list the console's form, the API's
    schema and ``recovery.decisions.decision_record`` all take, with the words the console shows."""

    HAPPENED = "happened", "It happened"
    RETRY_SAME_KEY = "retry_same_key", "It did not happen: retry with the same key"
    NOT_HAPPENED = "not_happened", "It did not happen: do not retry"
    COMPENSATE = "compensate", "Compensate (run the tool's inverse)"
    ESCALATE = "escalate", "Escalate to someone"


def overdue_q(now) -> Q:
    """``UncertainCall.is_overdue`` as a query condition (see there for what overdue means)."""
    return Q(state__in=UNRESOLVED_STATES, deadline__lt=now)


class UncertainCallQuerySet(models.QuerySet):
    def unresolved(self):
        return self.filter(state__in=UNRESOLVED_STATES)

    def overdue(self, now):
        """The calls ``is_overdue(now)`` is true of, in SQL (served by the partial index
        ``reckon_uc_open_deadline``)."""
        return self.filter(overdue_q(now))


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
    # Not indexed: the only read by key (the decision log's tool and tenant) names the run too,
    # and the (run_id, start_seq) constraint's index finds a run's few rows.
    idempotency_key = models.CharField(max_length=200)
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
    # The timestamp of the event that resolved the call (its ``ts``, not when it was stored): an
    # imported call settled months ago was not open today, whenever its log arrived.
    resolved_at = models.DateTimeField(null=True, blank=True)
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
    # No index: no screen reads calls by who holds them (the row carries the name), and the one
    # statement that would use it, clearing the column when a user is deleted, is rare enough to scan.
    claimed_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_index=False)
    claimed_by_name = models.CharField(max_length=150, blank=True, default="")
    claimed_at = models.DateTimeField(null=True, blank=True)
    # The first time a person did anything about the call (claimed, assigned, released, noted or
    # decided it), kept after later claims and releases change ``claimed_at``: the reports' "time to
    # first human touch" (docs/reports.md).
    first_touch_at = models.DateTimeField(null=True, blank=True)
    notes = models.IntegerField(default=0)
    last_seq = models.BigIntegerField(default=0)  # the last event of the run that changed this row
    version = models.IntegerField(default=1)
    updated_at = models.DateTimeField(db_default=Now())

    objects = UncertainCallQuerySet.as_manager()

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
            # The overview chart's recently resolved calls.
            models.Index(fields=["resolved_at"], name="reckon_uc_resolved_at", condition=Q(state="resolved")),
            # The reports' calls resolved after their deadline (the worst ten, the trend's overdue
            # counts): the few late ones, where the resolved history is every call (recovery.reports).
            models.Index(fields=["deadline"], name="reckon_uc_resolved_late", condition=Q(state="resolved", resolved_at__gt=F("deadline"))),
            # Filters over every state (resolved, all, in flight with a risk class, tool or tenant)
            # and the worker's due calls and detection (state first). Which index each screen's,
            # endpoint's and the worker's statement uses, measured: docs/recovery.md "The queue
            # table's indexes" (``manage.py bench console`` prints the plans). An index no plan
            # used was dropped (recovery 0005): every one costs each insert and most updates.
            models.Index(fields=["risk_class", "state", "started_at"], name="reckon_uc_risk"),
            models.Index(fields=["tool", "state"], name="reckon_uc_tool"),
            models.Index(fields=["tenant", "state"], name="reckon_uc_tenant"),
            models.Index(fields=["state", "next_attempt_at"], name="reckon_uc_due"),
        ]
        ordering = ["-possible_duplicate", "started_at", "id"]

    def __str__(self) -> str:
        return f"{self.run_id}#{self.start_seq} {self.tool} ({self.state})"

    def decidable(self) -> str | None:
        """None when a person may decide this call now; otherwise why not, in words for an operator.

        In flight: the agent that started the call still owns its run (or did until moments ago
        and detection has not yet declared the call uncertain), so it may still complete the call
        itself; a decision taken now could contradict what it does. Resolved: the call is settled.
        Every front end asks this one method, and ``recovery.decisions.decision_record`` refuses
        with its answer (``NotDecidable``), so no caller can get round it.
        """
        if self.state == self.State.IN_FLIGHT:
            return "This call is still in flight: the agent that started it holds its run's lease and may still complete it. It can be decided once it is declared uncertain, when that lease is gone."
        if self.state == self.State.RESOLVED:
            how = self.disposition or "resolved"
            # A rule's text may quote an adapter's error (and so a sensitive value): this sentence
            # goes into API errors and console messages unmasked, so it names a person, never a rule.
            by = "a rule" if self.resolution_kind == "automatic" else self.resolved_by
            return f"This call is already resolved ({how}{', by ' + by if by else ''}): there is nothing left to decide."
        return None

    def is_overdue(self, now) -> bool:
        """Past its recovery deadline while in doubt and unsettled: state open, reconciling or
        escalated (``UNRESOLVED_STATES``) and ``deadline < now``. ``objects.overdue(now)`` is the
        same condition in SQL.

        An in-flight call is never overdue, even past its deadline. Overdue is the "unresolved
        uncertainty past its recovery deadline", the figure that tells people where to intervene;
        an in-flight call is not uncertain yet (its writer's lease is live and it may complete the
        call), and nobody may decide it (``decidable``), so naming it would ask for an
        intervention that is refused. Nothing is lost by waiting: the deadline runs from the start,
        so the moment detection declares such a call uncertain it is overdue, is counted in the
        queue figures, ranks with the overdue irreversible calls, and an irreversible one is
        escalated at its next reconciliation attempt.
        """
        return self.state in UNRESOLVED_STATES and self.deadline is not None and self.deadline < now


class InFlightCall(models.Model):
    """A start whose writer may still complete it, and about which nothing else has happened.

    The agent's hot path keeps one of these per tool call instead of a full ``UncertainCall``, on
    the run's own row (``Run.in_flight``): the start's append adds it in the fence's UPDATE, the
    live completion's append removes it the same way, and nothing is left behind. This model reads
    them through the view ``reckon_in_flight_call`` (recovery migration 0008), one row per call,
    so it cannot be written through the ORM; the projection writes the column. It carries what
    detection needs to find a start its writer abandoned (run, seq, epoch) and what the console's
    "in flight" list shows (tool, tenant, key, started at). The moment anything else happens to
    the call (detection declares it uncertain, a completion flags it a possible duplicate, a person
    claims it) the projection promotes it to an ``UncertainCall`` with the same ``id``, so the
    call's address in the console and the API does not change. The view has no index of its own:
    reading one run's calls is the run's primary key, and reading all of them scans the run table
    (the price of a hot path that writes no index entry).
    """

    pk = models.CompositePrimaryKey("run_id", "start_seq")
    run_id = models.CharField(max_length=200)
    start_seq = models.BigIntegerField()
    # Drawn from UncertainCall's id sequence: the id the full row keeps when the call is promoted.
    id = models.BigIntegerField()
    call_id = models.CharField(max_length=200)
    idempotency_key = models.CharField(max_length=200)
    tool = models.CharField(max_length=200)
    tenant = models.CharField(max_length=200, default="default")
    started_at = models.DateTimeField()
    start_epoch = models.BigIntegerField(default=0)

    class Meta:
        db_table = "reckon_in_flight_call"
        managed = False  # a view over reckon_run.in_flight

    def __str__(self) -> str:
        return f"{self.run_id}#{self.start_seq} {self.tool} (in flight)"


class ToolPolicy(models.Model):
    """How one tool's uncertain calls are reconciled (docs/recovery.md, Policies)."""

    tool = models.CharField(max_length=200, unique=True)
    risk_class = models.CharField(max_length=16, choices=UncertainCall.Risk.choices)
    strategy = models.CharField(max_length=32, choices=[(s, s) for s in STRATEGIES])
    semantic_fields = models.JSONField(default=list, blank=True)
    deadline_s = models.PositiveIntegerField(default=900)
    key_retention_s = models.PositiveIntegerField(null=True, blank=True)
    # How long a completed read may be trusted on resume (read-only and idempotent tools only).
    fresh_for_s = models.PositiveIntegerField(null=True, blank=True)
    sensitive_fields = models.JSONField(default=list, blank=True)
    lookup = models.JSONField(null=True, blank=True)
    execute = models.JSONField(null=True, blank=True)
    compensate = models.JSONField(null=True, blank=True)
    value_rules = models.JSONField(default=list, blank=True)
    source = models.JSONField(default=dict, blank=True, help_text="the policy as written (its [tools.<name>] table)")
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


class RecordedCalls(models.Model):
    """The reports' roll-up of recorded tool calls: how many calls (starts that are not Reckon's own
    retries) a run recorded of a tool for a tenant on a UTC day. A read model kept by the rule in
    ``recovery.recorded`` in every append's transaction and rebuilt by ``rebuild_projections``, so
    that a report counts the period's calls from a few rows per run and day instead of scanning the
    period's events. One row per run (not per tenant and tool alone): each run is written by one
    lease holder at a time, so concurrent agents never wait on each other's counter, and a report
    for a token limited to tenants still narrows it by run."""

    run_id = models.CharField(max_length=200)
    day = models.DateField()
    tool = models.CharField(max_length=200)
    tenant = models.CharField(max_length=200)
    calls = models.BigIntegerField()

    class Meta:
        db_table = "reckon_recorded_calls"
        constraints = [models.UniqueConstraint(fields=["run_id", "day", "tool", "tenant"], name="reckon_recorded_calls_key")]
        indexes = [models.Index(fields=["day", "tool", "tenant"], name="reckon_recorded_calls_day")]

    def __str__(self) -> str:
        return f"{self.run_id} {self.day} {self.tool} ({self.tenant}): {self.calls}"
