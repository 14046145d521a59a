"""Which tenants a run belongs to, kept as a read model beside every append.

A run's tenants are the ones its events name: ``tenant`` on ``run_started`` (an agent may declare
it) and on every ``tool_call_started`` (schema version 2 fills it in, from the arguments or
``default``; version 1 events are read through the upcasters so both give the same answer). A run
that names none belongs to ``default``. Who may see which run is decided above,
in ``access.tenancy``.

The rule (``RULE``, applied in the order of ``runs.rules``) runs inside ``events_append``'s transaction, so the table can never disagree with the
committed log; ``run_tenants_rebuild`` recomputes it from the log for data written before it existed.
"""

from __future__ import annotations

from typing import Iterable

from runs.events import CURRENT_SCHEMA_VERSION, EventType, rule_table
from runs.fold import Event
from runs.models import Event as EventRow
from runs.models import RunTenant
from runs.rules import ReadModelRule, rows_insert, rows_insert_rider, rows_insert_statement
from runs.store import Rider, StatementPart, events_read
from runs.upcasters import DEFAULT_TENANT, tenant_of, events_upcast, payload_complete

# The rule, keyed by event type: the tenant each type names, read from its payload as the upcasters
# and the store's defaults read it, for the events whose reading is the same in every known
# version: a start's own ``tenant``, else its arguments' (``tenant_of``; no version changes a tenant
# a start records), and run_started's own. (A start's upcast is a copy of its payload and, for
# version 1, its key computed again, all to read one field; an import reads one per call.)
TENANT_RULES = rule_table(
    "run-tenant model",
    {
        EventType.RUN_STARTED: lambda p: p.get("tenant"),
        EventType.TOOL_CALL_STARTED: lambda p: p["tenant"] if "tenant" in p else tenant_of(p.get("arguments")),
    },
    ignored=[t for t in EventType if t not in (EventType.RUN_STARTED, EventType.TOOL_CALL_STARTED)],
)
TENANT_NAMING = tuple(TENANT_RULES)


def _tenant_read(ev: Event) -> object:
    """The tenant ``ev`` names, by the rule table (an event of a type it reads, in a known version)."""
    return TENANT_RULES[ev.type](ev.payload)


def tenants_named(run_id: str, events: Iterable[Event]) -> set[str]:
    found = set()
    slow = []
    for ev in events:
        if ev.type in TENANT_RULES:
            if type(ev.payload) is dict and type(ev.v) is int and 1 <= ev.v <= CURRENT_SCHEMA_VERSION:
                tenant = _tenant_read(ev)
                if isinstance(tenant, str) and tenant:
                    found.add(tenant)
            else:
                slow.append(ev)
    for ev in events_upcast(slow, run_id):  # raises for a version no release writes
        # A current-version payload a writer sent without its defaulted fields gets them filled
        # exactly as the store will fill them.
        tenant = payload_complete(ev.type, ev.payload, run_id).get("tenant")
        if isinstance(tenant, str) and tenant:
            found.add(tenant)
    return found


def _tenant_rows(run_id: str, events: list[Event]) -> list[tuple[str, str]]:
    """The rule's rows: one ``RunTenant`` (run id, tenant) per tenant ``events`` name."""
    return [(run_id, t) for t in sorted(tenants_named(run_id, events))]


def run_tenants_project(run_id: str, events: list[Event], epoch: int) -> None:
    """The rule applied in the append's transaction: record the tenants ``events`` name (any epoch)."""
    rows_insert(RunTenant, _tenant_rows(run_id, events))


def run_tenants_statement(run_id: str, event: Event) -> StatementPart | None:
    """``run_tenants_project`` for one event, as part of the append's statement (PostgreSQL):
    the same rows, inserted by the statement ``runs.rules`` generates from them."""
    if event.type not in TENANT_RULES:  # a completion, say: it names no tenant to record
        return StatementPart()
    return rows_insert_statement(RunTenant, _tenant_rows(run_id, [event]))


def run_tenants_rider(run_id: str, events: list[Event]) -> Rider | None:
    """``run_tenants_project`` for a batch, riding in the append's statement (PostgreSQL): the same
    rows, inserted by the statement ``runs.rules`` generates from them."""
    return rows_insert_rider(RunTenant, _tenant_rows(run_id, events))


RULE = ReadModelRule("run tenants", frozenset(TENANT_NAMING), run_tenants_project, statement=run_tenants_statement, rider=run_tenants_rider)


def run_tenant_claim(*, run_id: str, tenant: str) -> None:
    """Record ``tenant`` for a run that names none yet (a tenant-limited agent opening a new run)."""
    if not RunTenant.objects.filter(run_id=run_id).exists():
        RunTenant.objects.bulk_create([RunTenant(run_id=run_id, tenant=tenant)], ignore_conflicts=True)


def run_tenants(*, run_id: str) -> set[str]:
    return set(RunTenant.objects.filter(run_id=run_id).values_list("tenant", flat=True)) or {DEFAULT_TENANT}


def run_tenants_rebuild() -> int:
    """Recompute the table from the log; returns the number of rows written."""
    RunTenant.objects.all().delete()
    n = 0
    for run_id in EventRow.objects.filter(type__in=TENANT_NAMING).values_list("run_id", flat=True).distinct():
        rows = _tenant_rows(run_id, [e for e in events_read(run_id=run_id) if e.type in TENANT_RULES])
        rows_insert(RunTenant, rows)
        n += len(rows)
    return n
