"""Reads of the recovery engine. The console, the API and the commands call these; none queries
``UncertainCall`` by hand, so "most dangerous first" and "overdue" mean one thing everywhere."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from django.db import connection
from django.db.models import Case, Count, IntegerField, Min, Q, QuerySet, Value, When
from django.db.models.expressions import RawSQL
from django.utils import timezone as djtz

from recovery.models import UNRESOLVED_STATES, InFlightCall, ToolPolicy, UncertainCall, overdue_q
from recovery.policies import Policy, policy_from_row, unclassified_policy
from recovery.projection import in_flight_call_get, in_flight_calls_list
from runs.models import Run
from runs.paging import CursorError, Page, cursor_decode, cursor_encode
from runs.store import events_load

S = UncertainCall.State
STATES = tuple(S.values)


class QueryError(ValueError):
    """A filter value that cannot be used; the message names the parameter."""


def fresh_for_by_tool() -> dict[str, float]:
    """Seconds a tool's result may be trusted, for every tool whose policy sets ``fresh_for``."""
    return dict(ToolPolicy.objects.filter(fresh_for_s__isnull=False).values_list("tool", "fresh_for_s"))


def policy_for(tool: str) -> Policy:
    """The tool's policy, or the unclassified default (irreversible, escalate)."""
    row = ToolPolicy.objects.filter(tool=tool).first()
    return policy_from_row(row) if row is not None else unclassified_policy(tool)


def _overdue_irreversible(now: datetime) -> Q:
    return overdue_q(now) & Q(risk_class="irreversible")


def _danger_branches(qs, now: datetime) -> list[tuple[int, object]]:
    """The queue split by danger rank, each part a plain range that an index serves in order.

    Danger is 0 when the effect may exist twice, 1 for an overdue irreversible call
    (``UncertainCall.is_overdue``: never an in-flight one), 2 for the rest. Rank 1 depends on the
    clock (a call becomes overdue with no event), so it cannot be a stored column kept by the
    projection. Sorting by a CASE expression made the
    database rank every matching row before it could return the first page; as three queries, each
    ordered by (started_at, id) and limited, each is an index range scan that stops after a page.
    """
    late = _overdue_irreversible(now)
    return [
        (0, qs.filter(possible_duplicate=True)),
        (1, qs.filter(late, possible_duplicate=False)),
        (2, qs.filter(possible_duplicate=False).exclude(late)),
    ]


def _cursor_decode(cursor: str) -> tuple[int, datetime, int]:
    try:
        return cursor_decode(cursor, (int, datetime, int))
    except CursorError as exc:
        raise QueryError(f"after={cursor[:80]!r} is not a cursor this list returned: {exc}") from None


def _values(v: str | list[str] | tuple[str, ...] | None) -> list[str] | None:
    """A filter's value as a list of exact values (None: no filter)."""
    if v is None or v == "":
        return None
    return [v] if isinstance(v, str) else list(v)


def _calls_query(*, risk_class=None, tool=None, tenant=None, state=None, min_age_s=None, possible_duplicate=None, claimed_by_name=None, unclaimed=None, now=None):
    """The uncertain calls a queue filter matches, unordered, and the states it covers."""
    if state is None:
        states = list(UNRESOLVED_STATES)
    elif state == "all":
        states = list(STATES)
    else:
        states = [state] if isinstance(state, str) else list(state)
        bad = [s for s in states if s not in STATES]
        if bad:
            raise QueryError(f"state {bad[0]!r} is not one of {', '.join(STATES)}")
    if risk_class is not None and risk_class not in UncertainCall.Risk.values:
        raise QueryError(f"risk_class {risk_class!r} is not one of {', '.join(UncertainCall.Risk.values)}")
    qs = UncertainCall.objects.filter(state__in=states)
    if risk_class:
        qs = qs.filter(risk_class=risk_class)
    tools, tenants = _values(tool), _values(tenant)
    if tools is not None:
        qs = qs.filter(tool__in=tools)
    if tenants is not None:
        qs = qs.filter(tenant__in=tenants)
    if possible_duplicate is not None:
        qs = qs.filter(possible_duplicate=bool(possible_duplicate))
    if claimed_by_name:
        qs = qs.filter(claimed_by_name=claimed_by_name)
    if unclaimed:
        qs = qs.filter(claimed_by_name="")
    if min_age_s is not None:
        try:
            qs = qs.filter(started_at__lte=now - timedelta(seconds=float(min_age_s)))
        except (TypeError, ValueError, OverflowError):
            raise QueryError(f"min_age_s must be a number of seconds, got {min_age_s!r}") from None
    return qs, states, tools, tenants


def uncertain_calls_count(*, cap: int = 10_000, **filters) -> tuple[int, bool]:
    """How many calls ``uncertain_calls_filter`` with these filters lists in all, counting at most
    ``cap`` (then the answer is ``(cap, False)``: "more than"), so a count over a long history reads
    no more than ``cap`` index entries. Calls in flight kept in the narrow table count too."""
    now = djtz.now()
    qs, states, tools, tenants = _calls_query(now=now, **filters)
    n = qs.order_by()[: cap + 1].count()
    if S.IN_FLIGHT in states and filters.get("possible_duplicate") is not True and not filters.get("claimed_by_name") and n <= cap:
        min_age_s = filters.get("min_age_s")
        flying = in_flight_calls_list(tool=tools, tenant=tenants, started_before=now - timedelta(seconds=float(min_age_s)) if min_age_s is not None else None, limit=cap + 1 - n)
        n += len([r for r in flying if not filters.get("risk_class") or r.risk_class == filters["risk_class"]])
    return (n, True) if n <= cap else (cap, False)


def uncertain_calls_filter(
    *,
    risk_class: str | None = None,
    tool: str | list[str] | None = None,
    tenant: str | list[str] | None = None,
    state: str | list[str] | None = None,
    min_age_s: float | None = None,
    possible_duplicate: bool | None = None,
    claimed_by_name: str | None = None,
    unclaimed: bool | None = None,
    after: str | None = None,
    limit: int = 50,
    scope: Callable[[QuerySet], QuerySet] | None = None,
) -> Page:
    """The queue, most dangerous first: possible duplicates, then overdue irreversible calls, then age.

    ``state`` defaults to the unresolved states (open, reconciling, escalated); pass "all" or a list.
    ``tool`` and ``tenant`` are exact values or lists of them; ``claimed_by_name`` keeps the calls a
    person holds, ``unclaimed`` those nobody holds. ``scope`` narrows a queryset of rows with a
    ``run_id`` to the runs the caller may see (``access.tenancy.runs_visible``): a call is listed
    only when its run would be.
    Keyset pagination: pass the returned ``next`` as ``after``. Each item carries ``danger`` (0, 1, 2)
    and ``overdue`` attributes.
    """
    now = djtz.now()
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 500:
        raise QueryError(f"limit must be between 1 and 500, got {limit!r}")
    qs, states, tools, tenants = _calls_query(
        risk_class=risk_class, tool=tool, tenant=tenant, state=state, min_age_s=min_age_s, possible_duplicate=possible_duplicate, claimed_by_name=claimed_by_name, unclaimed=unclaimed, now=now
    )
    if scope is not None:
        qs = scope(qs)
    d, ts, pk = _cursor_decode(after) if after else (-1, None, None)
    parts = []
    for rank, part in _danger_branches(qs, now):
        if rank < d:
            continue  # the cursor is past this rank
        if rank == d:
            part = part.filter(Q(started_at__gt=ts) | Q(started_at=ts, id__gt=pk))
        parts.append(part.annotate(danger=Value(rank, output_field=IntegerField())).order_by("started_at", "id")[: limit + 1])
    if len(parts) == 1:  # the cursor is in the last rank
        items = list(parts[0])
    elif connection.features.supports_slicing_ordering_in_compound:
        # One query whatever the page size: each rank's page, from its own index, then merged.
        items = list(parts[0].union(*parts[1:], all=True).order_by("danger", "started_at", "id")[: limit + 1])
    else:  # SQLite cannot limit the parts of a UNION: the same pages, read one rank at a time
        items = []
        for part in parts:
            if len(items) > limit:
                break
            items.extend(part[: limit + 1 - len(items)])
    page_full_before_rank_2 = len(items) > limit and items[limit].danger < 2
    if S.IN_FLIGHT in states and possible_duplicate is not True and not claimed_by_name and d <= 2 and not page_full_before_rank_2:
        # Calls in flight kept in the narrow table: never a possible duplicate, never overdue, never
        # claimed, so rank 2, merged into the page in (started_at, id) order.
        flying = in_flight_calls_list(tool=tools, tenant=tenants, started_before=now - timedelta(seconds=float(min_age_s)) if min_age_s is not None else None)
        flying = [r for r in flying if (not risk_class or r.risk_class == risk_class) and (d < 2 or (r.started_at, r.pk) > (ts, pk))]
        if scope is not None and flying:
            seen = set(scope(Run.objects.filter(run_id__in={r.run_id for r in flying})).values_list("run_id", flat=True))
            flying = [r for r in flying if r.run_id in seen]
        for r in flying:
            r.danger = 2
        items = sorted([*items, *flying], key=lambda r: (r.danger, r.started_at, r.pk))[: limit + 1]
    for row in items:
        row.overdue = row.is_overdue(now)
    nxt = None
    if len(items) > limit:
        items = items[:limit]
        last = items[-1]
        nxt = cursor_encode(last.danger, last.started_at, last.pk)
    return Page(items, nxt)


def uncertain_call_get(*, pk: int) -> UncertainCall:
    from recovery.errors import CallNotFound

    try:
        row = UncertainCall.objects.select_related("claimed_by").get(pk=pk)
    except (UncertainCall.DoesNotExist, ValueError, TypeError):
        row = in_flight_call_get(pk=pk)  # a call in flight kept in the narrow table
        if row is None:
            raise CallNotFound(pk) from None
    row.overdue = row.is_overdue(djtz.now())
    return row


_HISTORY_TYPES = {
    "tool_call_started",
    "tool_call_uncertain",
    "reconciliation_attempted",
    "tool_call_completed",
    "approval_requested",
    "approval_decided",
    "tool_call_resolved",
    "operator_note",
    "run_paused",
}


def uncertain_call_evidence(*, pk: int) -> dict:
    """The call's recovery history from the log: every attempt with its evidence, and every step.

    ``attempts``: one dict per reconciliation_attempted (seq, ts, attempt, phase, outcome, rule,
    action, error, evidence). ``history``: every event about the call (seq, ts, type, payload).
    """
    row = uncertain_call_get(pk=pk)
    events = events_load(run_id=row.run_id, after=row.start_seq - 1)
    history, attempts = [], []
    for ev in events:
        if ev.type not in _HISTORY_TYPES:
            continue
        p = ev.payload
        mine = (
            ev.seq == row.start_seq
            or p.get("start_seq") == row.start_seq
            or p.get("retry_of") == row.start_seq
            or (p.get("start_seq") is None and row.idempotency_key and p.get("idempotency_key") == row.idempotency_key)
            or (ev.type == "tool_call_completed" and p.get("call_id") == row.call_id and ev.seq == row.resolved_seq)
        )
        if not mine:
            continue
        history.append({"seq": ev.seq, "ts": ev.ts, "type": ev.type, "payload": p})
        if ev.type == "reconciliation_attempted":
            attempts.append(
                {
                    "seq": ev.seq,
                    "ts": ev.ts,
                    "attempt": p.get("attempt"),
                    "phase": p.get("phase", "lookup"),
                    "outcome": p.get("outcome"),
                    "rule": p.get("rule"),
                    "action": p.get("action"),
                    "error": p.get("error"),
                    "evidence": p.get("evidence"),
                }
            )
    return {"call": row, "attempts": attempts, "history": history}


def edges_bucket(field: str, edges: list[datetime]):
    """An expression: how many of the ascending instants ``edges`` are strictly before ``field``.

    So a row is counted at instant ``edges[i]`` exactly when ``field <= edges[i]``, that is when its
    bucket is at most ``i``. PostgreSQL's width_bucket does the binary search per row; it counts the
    edges at or before the value, so the edges move up by the timestamp resolution (1 microsecond)
    to exclude equality. SQLite gets the same answer from a CASE.
    """
    if connection.vendor == "postgresql":
        col = f"{connection.ops.quote_name(UncertainCall._meta.db_table)}.{connection.ops.quote_name(field)}"
        return RawSQL(f"width_bucket({col}, %s::timestamptz[])", [[e + timedelta(microseconds=1) for e in edges]], output_field=IntegerField())
    return Case(*[When(**{f"{field}__lte": e}, then=Value(i)) for i, e in enumerate(edges)], default=Value(len(edges)), output_field=IntegerField())


def unresolved_tally(*, edges: tuple[list[datetime], ...] = ()) -> list[dict]:
    """One pass over the unresolved calls, grouped by risk class and, for each list of instants in
    ``edges``, by ``edges_bucket`` of the call's start.

    Each item: ``risk_class``, ``buckets`` (a tuple, one index per edge list), ``n``, ``escalated``
    (how many were ever escalated) and ``oldest`` (the earliest start). The overview draws its
    figures, its 24-hour chart and its age histogram from this one scan (of a partial index that
    holds only unresolved calls), instead of one scan each.
    """
    keys = {f"b{i}": edges_bucket("started_at", e) for i, e in enumerate(edges)}
    qs = UncertainCall.objects.unresolved().annotate(**keys).values("risk_class", *keys)
    qs = qs.annotate(n=Count("id"), escalated=Count("id", filter=Q(escalated_at__isnull=False)), oldest=Min("started_at")).order_by()
    return [{"risk_class": r["risk_class"], "buckets": tuple(r[k] for k in keys), "n": r["n"], "escalated": r["escalated"], "oldest": r["oldest"]} for r in qs]


def queue_figures_by_risk(*, now: datetime | None = None, overdue_limit: int | None = None, tally: list[dict] | None = None) -> dict[str, dict]:
    """Per risk class: opened, reconciled automatically, escalated, still open, age of the oldest
    open call in seconds, how many are overdue (``overdue_count``) and the overdue calls themselves,
    most overdue first (``overdue``: all of them, or the ``overdue_limit`` most overdue per class).

    Unresolved calls are counted by ``unresolved_tally`` (pass one already made to reuse it);
    resolved ones by one grouped count over the resolved rows (the bulk of the table, so PostgreSQL
    reads them in one sequential pass; an index of them went unused); overdue ones from a partial
    index on (risk_class, deadline) of unresolved rows.
    """
    from django.db.models import F, Window
    from django.db.models.functions import RowNumber

    now = now or djtz.now()
    out = {r: {"opened": 0, "reconciled_automatically": 0, "escalated": 0, "still_open": 0, "oldest_age_s": None, "overdue_count": 0, "overdue": []} for r in UncertainCall.Risk.values}
    oldest: dict[str, datetime] = {}
    for t in unresolved_tally() if tally is None else tally:
        f = out[t["risk_class"]]
        f["opened"] += t["n"]
        f["still_open"] += t["n"]
        f["escalated"] += t["escalated"]
        if t["oldest"] is not None and (t["risk_class"] not in oldest or t["oldest"] < oldest[t["risk_class"]]):
            oldest[t["risk_class"]] = t["oldest"]
    for risk, first in oldest.items():
        out[risk]["oldest_age_s"] = round((now - first).total_seconds(), 1)
    settled = (
        UncertainCall.objects.filter(state=S.RESOLVED)
        .values("risk_class")
        .annotate(
            n=Count("id"),
            reconciled=Count("id", filter=Q(resolution_kind="automatic")),
            escalated=Count("id", filter=Q(escalated_at__isnull=False)),
        )
        .order_by()
    )
    for a in settled:
        f = out[a["risk_class"]]
        f["opened"] += a["n"]
        f["reconciled_automatically"] += a["reconciled"]
        f["escalated"] += a["escalated"]
    overdue = UncertainCall.objects.overdue(now)
    for a in overdue.values("risk_class").annotate(n=Count("id")).order_by():
        out[a["risk_class"]]["overdue_count"] = a["n"]
    listed = overdue.order_by("deadline", "id")
    if overdue_limit is not None:
        listed = listed.annotate(rank=Window(RowNumber(), partition_by=[F("risk_class")], order_by=[F("deadline").asc(), F("id").asc()])).filter(rank__lte=overdue_limit)
    for row in listed.values("id", "run_id", "call_id", "tool", "idempotency_key", "deadline", "risk_class", "state", "claimed_by_name"):
        out[row["risk_class"]]["overdue"].append(
            {
                "pk": row["id"],
                "run_id": row["run_id"],
                "call_id": row["call_id"],
                "tool": row["tool"],
                "idempotency_key": row["idempotency_key"],
                "state": row["state"],
                "claimed_by_name": row["claimed_by_name"],
                "deadline": row["deadline"],
                "overdue_s": round((now - row["deadline"]).total_seconds(), 1),
            }
        )
    return out


def uncertain_calls_count_by_state() -> dict[str, int]:
    """How many calls are in each state, every state named (0 when none).

    A call in flight is held in one of two tables: the narrow ``InFlightCall`` while nothing but
    its start has happened to it, a full ``UncertainCall`` row once anything else has (a flag, a
    claim). Both count as ``in_flight``, so the figure is the same whichever table holds a call.
    """
    counts = dict.fromkeys(STATES, 0)
    for row in UncertainCall.objects.values("state").annotate(n=Count("id")).order_by():
        counts[row["state"]] += row["n"]
    counts[S.IN_FLIGHT] += InFlightCall.objects.count()
    return counts


def uncertain_calls_export(*, state: str | list[str] | None = None) -> list[dict]:
    """The ``manage.py uncertain --json`` objects (docs/formats.md), most dangerous first."""
    from runs.fold import format_ts

    out, after = [], None
    while True:
        page = uncertain_calls_filter(state=state, after=after, limit=500)
        for r in page.items:
            out.append(
                {
                    "run_id": r.run_id,
                    "call_id": r.call_id,
                    "tool": r.tool,
                    "idempotency_key": r.idempotency_key,
                    "arguments": r.arguments,
                    "started_at": format_ts(r.started_at),
                    "start_seq": r.start_seq,
                    "risk_class": r.risk_class,
                    "deadline": format_ts(r.deadline),
                    "state": r.state,
                    "possible_duplicate": r.possible_duplicate,
                }
            )
        if page.next_cursor is None:
            return out
        after = page.next_cursor


_DISTINCT_COLUMNS = {"tool": "tool", "tenant": "tenant"}


def _distinct(table: str, column: str) -> list[str]:
    """Every distinct value of an indexed column. On PostgreSQL a loose index scan (one index probe
    per distinct value, however many rows) instead of reading every row; SQLite reads the index."""
    with connection.cursor() as c:
        if connection.vendor == "postgresql":
            c.execute(
                f"WITH RECURSIVE t(v) AS ((SELECT {column} FROM {table} ORDER BY {column} LIMIT 1) UNION ALL "
                f"SELECT (SELECT {column} FROM {table} WHERE {column} > t.v ORDER BY {column} LIMIT 1) FROM t WHERE t.v IS NOT NULL) "
                "SELECT v FROM t WHERE v IS NOT NULL"
            )
        else:
            c.execute(f"SELECT DISTINCT {column} FROM {table}")
        return [r[0] for r in c.fetchall()]


def calls_values_containing(*, column: str, text: str) -> list[str]:
    """The tools (or tenants) of calls whose name contains ``text``, ignoring case: what a console
    filter "tool contains" means, as exact values the queue's indexes serve."""
    if column not in _DISTINCT_COLUMNS:
        raise QueryError(f"no filter on {column!r}")
    needle = text.strip().casefold()
    values = set(_distinct(UncertainCall._meta.db_table, column))
    values.update(InFlightCall.objects.values_list(column, flat=True).distinct())
    if column == "tool":
        values.update(ToolPolicy.objects.values_list("tool", flat=True))
    return sorted(v for v in values if needle in v.casefold())
