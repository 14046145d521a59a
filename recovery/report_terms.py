"""The terms the managers' reports are made of, as the database computes them: whether a call was
resolved, touched or claimed by an instant, its deadline and resolution-target status, the trend
bucket a time falls in, nearest-rank percentiles of a duration per group, and a grouped read that
hashes. ``recovery.reports`` builds every table from these; docs/reports.md says what each means.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from django.db import connection
from django.db.models import Aggregate, BooleanField, Case, CharField, Count, DateTimeField, DurationField, F, IntegerField, Max, Q, QuerySet, Value, When, Window
from django.db.models.expressions import Combinable
from django.db.models.functions import RowNumber
from django.db.models.lookups import LessThanOrEqual

from runs.pg import settings_local


def resolved_by(as_of: datetime) -> Q:
    return Q(resolved_at__isnull=False, resolved_at__lt=as_of)


def touched_by(as_of: datetime) -> Q:
    return Q(first_touch_at__isnull=False, first_touch_at__lt=as_of)


def claimed_by(as_of: datetime) -> Q:
    return Q(claimed_at__lt=as_of) & ~Q(claimed_by_name="")


def flag(q: Q) -> Case:
    """Whether ``q`` holds for a call, as the database computes it."""
    return Case(When(q, then=Value(True)), default=Value(False), output_field=BooleanField())


def ended(as_of: datetime) -> Case:
    """When a call's wait ended as of ``as_of``: its resolution if by then, else ``as_of``."""
    return Case(When(resolved_by(as_of), then=F("resolved_at")), default=Value(as_of), output_field=DateTimeField())


def percentile_rank(p: float, n: int) -> int:
    """Nearest rank: the rank (from 1) of the p-th percentile of n sorted values, ceil(p/100 * n)."""
    return max(1, math.ceil(p / 100 * n))


class PercentileDisc(Aggregate):
    """PostgreSQL's ``percentile_disc(fraction) WITHIN GROUP (ORDER BY value)``: the first value
    whose position in the order reaches ``fraction`` of the group, the ceil(fraction * n)-th; the
    fraction is multiplied as ``percentile_rank`` does, so both engines pick the same rank."""

    function = "percentile_disc"
    template = "%(function)s(%(fraction)s) WITHIN GROUP (ORDER BY %(expressions)s)"

    def __init__(self, expression, p: float, **extra):
        super().__init__(expression, fraction=repr(float(p) / 100), **extra)


def ranks(qs: QuerySet, group: str, figures: dict[str, tuple[Combinable, Q]]) -> dict[str, dict]:
    """For each ``group`` of ``qs``: its rows (``calls``) and, for each figure ``name: (value,
    where)`` that holds for some of them, how many it holds for (``n``) and the p50, p90 and max of
    ``value`` (a duration) over those in seconds, as nearest-rank percentiles (``percentile_rank``),
    read by the database: ``{group value: {"calls": n, name: {"n", "p50", "p90", "max"}}}``.

    PostgreSQL computes them in one statement with ``percentile_disc``, which sorts each group's
    values alone. SQLite has no such function: there the groups are counted by one statement, and
    each figure is a statement counting the rows and one ranking them by ``value``
    (``row_number()``), which returns only the rows at the wanted ranks."""
    out: dict[str, dict] = {}
    if connection.vendor == "postgresql":
        aggregates = {"group_calls": Count("id")}
        for name, (value, where) in figures.items():
            aggregates |= {
                f"{name}_n": Count("id", filter=where), f"{name}_p50": PercentileDisc(value, 50, filter=where),
                f"{name}_p90": PercentileDisc(value, 90, filter=where), f"{name}_max": Max(value, filter=where),
            }  # fmt: skip
        for row in qs.values(group).annotate(**aggregates):
            out[row[group]] = {"calls": row["group_calls"]} | {
                name: {"n": row[f"{name}_n"], **{p: seconds(row[f"{name}_{p}"]) for p in ("p50", "p90", "max")}} for name in figures if row[f"{name}_n"]
            }  # fmt: skip
        return out
    out = {k: {"calls": n} for k, n in qs.values_list(group).annotate(n=Count("id"))}
    for name, (value, where) in figures.items():
        kept = qs.filter(where).annotate(value=value)
        n_of = dict(kept.values_list(group).annotate(n=Count("id")))
        wanted = {k: {"p50": percentile_rank(50, n), "p90": percentile_rank(90, n), "max": n} for k, n in n_of.items()}
        ranked = kept.annotate(rank=Window(RowNumber(), partition_by=[F(group)], order_by=[F("value").asc(), F("id").asc()]))
        at = {(k, r): seconds(v) for k, r, v in ranked.filter(rank__in={r for w in wanted.values() for r in w.values()}).values_list(group, "rank", "value")}
        for k, rank_of in wanted.items():
            out[k][name] = {"n": n_of[k], **{p: at[k, r] for p, r in rank_of.items()}}
    return out


def seconds(d: timedelta | None) -> float | None:
    return None if d is None else round(d.total_seconds(), 3)


def deadline_status(as_of: datetime) -> Case:
    """A call's deadline status at ``as_of``, as the database computes it for every table and the
    detail export: no deadline; resolved by ``as_of`` within or after it (late); unresolved and
    past it (overdue); or open, in time."""
    done = Q(resolved_at__lt=as_of)
    return Case(
        When(deadline__isnull=True, then=Value("no deadline")),
        When(done & Q(resolved_at__lte=F("deadline")), then=Value("within")),
        When(done, then=Value("late")),
        When(deadline__lt=as_of, then=Value("overdue")),
        default=Value("open, in time"),
        output_field=CharField(),
    )


def sla_status(as_of: datetime, targets: dict[str, int]) -> Case:
    """``met``, ``breached`` or ``pending`` (unresolved and its target not yet passed) against the
    tool's resolve_within from the start, or the call's deadline where the policy names none; as
    the database computes it for ``sla`` and ``sla_trend``."""
    done = Q(resolved_at__lt=as_of)  # implies "not null"
    took = F("resolved_at") - F("started_at")
    whens = []
    for tool, within_s in sorted(targets.items()):
        within = timedelta(seconds=within_s)
        whens += [
            When(Q(tool=tool) & done & Q(LessThanOrEqual(took, Value(within, output_field=DurationField()))), then=Value("met")),
            When(Q(tool=tool) & done, then=Value("breached")),
            When(Q(tool=tool, started_at__lt=as_of - within), then=Value("breached")),  # its target (start + within) passed
            When(tool=tool, then=Value("pending")),
        ]
    whens += [
        When(done & Q(deadline__isnull=True), then=Value("met")),
        When(deadline__isnull=True, then=Value("pending")),
        When(done & Q(resolved_at__lte=F("deadline")), then=Value("met")),
        When(done, then=Value("breached")),
        When(deadline__lt=as_of, then=Value("breached")),
    ]
    return Case(*whens, default=Value("pending"), output_field=CharField())


def bucket(field: str, buckets: list[tuple[datetime, datetime]], *, outside: Q | None = None) -> Case:
    """The index of the trend bucket ``field`` falls in, for rows already within the period (or
    none for the rows ``outside`` names)."""
    whens = [When(outside, then=Value(None))] if outside is not None else []
    whens += [When(**{f"{field}__lt": b1}, then=Value(i)) for i, (_, b1) in enumerate(buckets)]
    return Case(*whens, default=None, output_field=IntegerField())


def hashed(qs: QuerySet) -> list[dict]:
    """``qs``'s groups, counted by hashing on PostgreSQL: the planner cannot know that the calls
    fall into few groups (it estimates one per call or so), so it sorts every call by every key,
    which took twice as long as hashing them (100,000 calls in 6 groups: 250 ms and 115 ms; 500,000
    in 107: 1,240 ms and 640 ms). Sorting is turned off for this statement alone. For the same
    reason the planner thinks handing each worker's rows to the leader as dear as the rows are many,
    and keeps the read to one process; with that cost lowered (``parallel_tuple_cost``), two workers
    compute each call's keys and the leader hashes them (100,000 calls: about 130 ms to 95 ms)."""
    if connection.vendor != "postgresql":
        return list(qs)
    with settings_local(enable_sort="off", enable_incremental_sort="off", parallel_tuple_cost="0.001"):
        return list(qs)
