"""The managers' reports: every figure of the reports screen, its CSV files and the API's JSON.

Each table is one function here, a pure read of the uncertain-call read model (and, for the calls
recorded per tool, of the recorded calls roll-up, ``recovery.recorded``), taking a period [start, end) in UTC and the filters.
The console, the CSV exports and ``GET /api/reports/...`` all call these, so a figure is computed
once. How each figure is computed, the period's edges and the percentile definition are in
docs/reports.md; the short version:

- a call belongs to the period its start (``started_at``) falls in; the deadline runs from the
  start too, so "opened" and the times measured from it share one clock;
- everything is as of ``as_of = min(end, now)``: a call resolved after that was still open then, so
  a closed period's figures do not change later;
- percentiles are nearest-rank: the p-th percentile of n sorted values is the ceil(p/100 * n)-th.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta, timezone

from django.contrib.auth.models import Group
from django.db.models import Case, CharField, Count, DurationField, ExpressionWrapper, F, Q, QuerySet, Sum, Value, When
from django.db.models.functions import Greatest, TruncDay

from recovery import report_terms as terms
from recovery.models import RISK_CLASSES, UNRESOLVED_STATES, RecordedCalls, ToolPolicy, UncertainCall
from recovery.policies import policy_from_row

UTC = timezone.utc
PERIOD_DAYS = (7, 30, 90)
MAX_DAYS = 366
DAILY_UP_TO_DAYS = 31  # longer periods are drawn per week
WORST_SHOWN = 10
# What a person's decision that settles a call leaves as the call's disposition (recovery.decisions).
DECISION_OF_DISPOSITION = {"completed": "happened", "retried": "retry_same_key", "not_happened": "not_happened", "compensated": "compensate"}
AUTOMATIC_OUTCOMES = ("completed", "retried", "not_happened", "compensated")


class ReportError(ValueError):
    """A period or filter that cannot be reported on, in words naming the parameter."""


@dataclass(frozen=True)
class Period:
    """The half-open UTC interval [start, end) a report covers."""

    start: datetime
    end: datetime

    @classmethod
    def last_days(cls, days: int, *, now: datetime) -> Period:
        """The last ``days`` whole UTC days, today included: [midnight ``days - 1`` days ago, tomorrow's midnight)."""
        if days not in PERIOD_DAYS:
            raise ReportError(f"days must be one of {', '.join(map(str, PERIOD_DAYS))}, got {days}")
        tomorrow = datetime.combine(now.astimezone(UTC).date() + timedelta(days=1), time(), UTC)
        return cls(tomorrow - timedelta(days=days), tomorrow)

    @classmethod
    def dates(cls, first: date, last: date) -> Period:
        """The UTC days ``first`` to ``last``, both included."""
        if last < first:
            raise ReportError(f"the last day ({last}) is before the first ({first})")
        if (last - first).days + 1 > MAX_DAYS:
            raise ReportError(f"a report covers at most {MAX_DAYS} days, got {(last - first).days + 1}")
        return cls(datetime.combine(first, time(), UTC), datetime.combine(last + timedelta(days=1), time(), UTC))

    @classmethod
    def choose(cls, *, days: int | None = None, since: date | None = None, until: date | None = None, now: datetime) -> Period:
        """The period a screen or an API call asked for: both dates, or the last ``days`` (30 by default)."""
        if since or until:
            if not (since and until):
                raise ReportError("give both since and until (UTC dates, both included), or neither")
            return cls.dates(since, until)
        return cls.last_days(days or 30, now=now)

    def as_of(self, now: datetime) -> datetime:
        return min(self.end, now)

    def buckets(self) -> list[tuple[datetime, datetime]]:
        """The trend's UTC buckets: days for periods up to DAILY_UP_TO_DAYS days, else weeks from
        the start (the last one shorter when the period is not whole weeks)."""
        step = timedelta(days=1 if self.end - self.start <= timedelta(days=DAILY_UP_TO_DAYS) else 7)
        out, at = [], self.start
        while at < self.end:
            out.append((at, min(at + step, self.end)))
            at += step
        return out


@dataclass(frozen=True)
class Filters:
    """What a report is narrowed to; empty means any. ``scope`` narrows a queryset to what the
    caller may see (``access.tenancy.runs_visible`` for a token limited to tenants), given the
    queryset and the name of its run id field."""

    tenant: str = ""
    tool: str = ""
    risk_class: str = ""
    team: str = ""
    scope: Callable[[QuerySet, str], QuerySet] | None = field(default=None, compare=False)

    def __post_init__(self):
        if self.risk_class and self.risk_class not in RISK_CLASSES:
            raise ReportError(f"risk_class must be one of {', '.join(RISK_CLASSES)}, got {self.risk_class!r}")
        if self.team and not Group.objects.filter(name=self.team).exists():
            raise ReportError(f"team {self.team!r} does not exist")

    def team_members(self) -> list[str]:
        return list(Group.objects.get(name=self.team).user_set.values_list("username", flat=True))


def teams() -> list[str]:
    """Every group of people a report can be narrowed to (the role groups too)."""
    return list(Group.objects.order_by("name").values_list("name", flat=True))


def _uncertain(f: Filters) -> QuerySet:
    """Every call that became uncertain (not in flight), narrowed by ``f``, any period."""
    qs = UncertainCall.objects.exclude(state=UncertainCall.State.IN_FLIGHT).order_by()
    for name in ("tenant", "tool", "risk_class"):
        if getattr(f, name):
            qs = qs.filter(**{name: getattr(f, name)})
    if f.team:
        members = f.team_members()
        qs = qs.filter(Q(claimed_by_name__in=members) | Q(resolution_kind="person", resolved_by__in=members))
    return f.scope(qs, "run_id") if f.scope else qs


def calls_in(period: Period, f: Filters) -> QuerySet:
    """The calls a report counts: uncertain, started in the period, narrowed by ``f``."""
    return _uncertain(f).filter(started_at__gte=period.start, started_at__lt=period.end)


# --- the period's calls, grouped once -------------------------------------------------------


def _targets() -> dict[str, int]:
    """Each tool's ``resolve_within`` in seconds, for the tools whose policy names one."""
    out = {}
    for row in ToolPolicy.objects.all():
        within = policy_from_row(row).resolve_within_s
        if within is not None:
            out[row.tool] = within
    return out


def _resolved_in(period: Period, as_of: datetime) -> Q:
    """Resolved within the period, by ``as_of``: the trend's resolved calls, whenever opened."""
    return Q(resolved_at__gte=period.start, resolved_at__lt=as_of)


_SHARED: ContextVar[dict | None] = ContextVar("reckon_report_groups", default=None)


def tables(names: Iterable[str], period: Period, f: Filters, *, now: datetime) -> dict[str, list[dict]]:
    """The named tables of one report, computed together: the counting tables share one read of
    the period's calls (``_groups``), where each alone reads it for itself. The tables of times and
    of people rank each call's times, and read the calls in statements of their own."""
    token = _SHARED.set({})
    try:
        return {name: TABLES[name](period, f, now=now) for name in names}
    finally:
        _SHARED.reset(token)


def _groups(period: Period, f: Filters, now: datetime) -> list[dict]:
    """The period's calls counted (``calls``) by everything a counting table tells them apart by:
    tool, risk class, ended by ``as_of`` (``done``) and how (``kind``, ``outcome``), deadline
    status, resolution target status, and the trend buckets of its start and of its resolution (if
    in the period). One statement, grouped by the database, from which the counting tables take
    their figures (a few hundred rows, where each table read every call)."""
    as_of = period.as_of(now)
    return _shared(("groups", period, id(f), as_of), lambda: _grouped(period, f, as_of))


def _shared(key: tuple, read: Callable[[], list]) -> list:
    """``read()``, once per ``key`` within ``tables``."""
    shared = _SHARED.get()
    if shared is None:
        return read()
    if key not in shared:
        shared[key] = read()
    return shared[key]


def _grouped(period: Period, f: Filters, as_of: datetime) -> list[dict]:
    done = terms.resolved_by(as_of)
    qs = (
        calls_in(period, f)
        .values(
            "tool", "risk_class",
            done=terms.flag(done),
            kind=Case(When(done, then=F("resolution_kind")), default=Value(""), output_field=CharField()),
            outcome=Case(When(done, then=F("disposition")), default=Value(""), output_field=CharField()),
            deadline_status=terms.deadline_status(as_of),
            sla_status=terms.sla_status(as_of, _targets()),
            bucket=terms.bucket("started_at", period.buckets()),
            resolved_bucket=terms.bucket("resolved_at", period.buckets(), outside=~_resolved_in(period, as_of)),
        )
        .annotate(calls=Count("id"))
    )  # fmt: skip
    return terms.hashed(qs)


_PAST_COLUMNS = ("id", "run_id", "call_id", "tool", "tenant", "risk_class", "started_at", "deadline", "resolved_at")


def _past_deadline(period: Period, f: Filters, as_of: datetime) -> QuerySet:
    """Every call (opened in the period or before it) whose deadline passed before ``as_of``, not
    resolved before the period nor by its deadline: the calls that were overdue at some instant of
    the period (a call resolved by its deadline never is). The trend's overdue counts and the
    worst ten."""
    # Every state but in flight, as _uncertain reads, spelled state by state so that the database
    # reads the unresolved calls past their deadline and the resolved ones after it from their
    # partial indexes (reckon_uc_open_deadline; reckon_uc_resolved_late, reckon_uc_resolved_at for
    # the few without a resolution time) instead of scanning every resolved call of the period.
    kept = Q(resolved_at__isnull=True) | Q(resolved_at__gte=period.start)
    late = Q(resolved_at__isnull=True) | Q(resolved_at__gt=F("deadline"))
    by_state = Q(state__in=UNRESOLVED_STATES, deadline__lt=as_of) | (Q(state=UncertainCall.State.RESOLVED) & kept & late)
    return _uncertain(f).filter(by_state, kept, late, deadline__lt=as_of)


def _count(groups: list[dict], *by: str, where: Callable[[dict], bool] = lambda g: True) -> Counter:
    """The calls of ``groups`` for which ``where`` holds, counted by the values of ``by``."""
    out: Counter = Counter()
    for g in groups:
        if where(g):
            out[g[by[0]] if len(by) == 1 else tuple(g[b] for b in by)] += g["calls"]
    return out


# --- tables ----------------------------------------------------------------------------------


def volume(period: Period, f: Filters, *, now: datetime) -> list[dict]:
    """Per tool: calls that became uncertain, calls recorded (starts in the event log, retries
    not counted: the roll-up ``recovery.recorded`` keeps their counts), and uncertain calls per
    thousand recorded; a last row ``(all)`` for the total."""
    uncertain = _count(_groups(period, f, now), "tool")
    # The recorded calls roll-up (recovery.recorded): a few rows per run and UTC day, where the
    # period's starts were a scan of its events. Periods are whole UTC days, so the days are exact.
    starts = RecordedCalls.objects.filter(day__gte=period.start.date(), day__lt=period.end.date())
    if f.tool:
        starts = starts.filter(tool=f.tool)
    if f.tenant:
        starts = starts.filter(tenant=f.tenant)
    if f.scope:
        starts = f.scope(starts, "run_id")
    recorded = Counter(dict(starts.order_by().values_list("tool").annotate(n=Sum("calls"))))
    tools = sorted(set(uncertain) | (set() if (f.risk_class or f.team) else set(recorded)))
    rows = [_volume_row(t, uncertain[t], recorded[t]) for t in tools]
    rows.append(_volume_row("(all)", sum(uncertain[t] for t in tools), sum(recorded[t] for t in tools)))
    return rows


def _volume_row(tool: str, uncertain: int, recorded: int) -> dict:
    per = round(uncertain * 1000 / recorded, 1) if recorded else None
    return {"tool": tool, "uncertain": uncertain, "recorded": recorded, "per_thousand": per}


def outcomes(period: Period, f: Filters, *, now: datetime) -> list[dict]:
    """How the period's calls ended by ``as_of``: automatically (per disposition), by a person (per
    decision), by the run itself (its agent completed it after all), or still open."""
    groups = _groups(period, f, now)
    done = _count(groups, "kind", "outcome", where=lambda g: g["done"])
    rows = [{"ended": "automatically", "outcome": d, "calls": done.pop(("automatic", d), 0)} for d in AUTOMATIC_OUTCOMES]
    rows += [{"ended": "by a person", "outcome": dec, "calls": done.pop(("person", d), 0)} for d, dec in DECISION_OF_DISPOSITION.items()]
    rows.append({"ended": "by the run itself", "outcome": "completed", "calls": sum(n for (k, _), n in list(done.items()) if k == "run")})
    for (k, d), n in sorted(done.items()):
        if k != "run":  # anything else the log holds (a proven failure's "failed"), named as it is
            rows.append({"ended": {"automatic": "automatically", "person": "by a person"}.get(k, k or "unknown"), "outcome": d or "unknown", "calls": n})
    rows.append({"ended": "still open", "outcome": "", "calls": sum(_count(groups, "done", where=lambda g: not g["done"]).values())})
    return rows


def _times(period: Period, f: Filters, group: str, now: datetime) -> list[dict]:
    """``times_by_risk`` and ``times_by_tool``: one statement of their own (``terms.ranks``), which
    counts each group's calls as it ranks their times, so that the table needs no other read of the
    period's calls (the reports screen fetches it on its own, after the headline figures)."""
    as_of = period.as_of(now)
    figures = terms.ranks(calls_in(period, f), group, {
        "touch": (F("first_touch_at") - F("started_at"), terms.touched_by(as_of)),
        "resolve": (F("resolved_at") - F("started_at"), terms.resolved_by(as_of)),
    })  # fmt: skip
    keys = [k for k in RISK_CLASSES if k in figures] if group == "risk_class" else sorted(figures)
    out = []
    for k in keys:
        touch, resolve = figures[k].get("touch", {}), figures[k].get("resolve", {})
        out.append({
            group: k, "calls": figures[k]["calls"],
            "touched": touch.get("n", 0), "touch_p50_s": touch.get("p50"), "touch_p90_s": touch.get("p90"), "touch_max_s": touch.get("max"),
            "resolved": resolve.get("n", 0), "resolve_p50_s": resolve.get("p50"), "resolve_p90_s": resolve.get("p90"), "resolve_max_s": resolve.get("max"),
        })  # fmt: skip
    return out


def times_by_risk(period: Period, f: Filters, *, now: datetime) -> list[dict]:
    """Per risk class: time from start to first human touch and to resolution, p50 / p90 / max in
    seconds, over the calls touched (resolved) by ``as_of``; calls not yet touched (resolved) are
    counted in ``calls`` only."""
    return _times(period, f, "risk_class", now)


def times_by_tool(period: Period, f: Filters, *, now: datetime) -> list[dict]:
    """``times_by_risk`` per tool."""
    return _times(period, f, "tool", now)


def deadlines(period: Period, f: Filters, *, now: datetime) -> list[dict]:
    """Per risk class: resolved within the deadline, resolved late, still overdue at ``as_of``,
    still open and in time, no deadline; and the share late or overdue of those whose deadline had
    passed or that were resolved (``missed_pct``)."""
    counts: dict[str, Counter] = defaultdict(Counter)
    for (risk, status), n in _count(_groups(period, f, now), "risk_class", "deadline_status").items():
        counts[risk][status] += n
    rows = []
    for risk in [r for r in RISK_CLASSES if r in counts]:
        c = counts[risk]
        judged = c["within"] + c["late"] + c["overdue"]
        missed = round(100 * (c["late"] + c["overdue"]) / judged, 1) if judged else None
        rows.append({"risk_class": risk, "within": c["within"], "late": c["late"], "overdue": c["overdue"], "open_in_time": c["open, in time"], "no_deadline": c["no deadline"], "missed_pct": missed})
    return rows


def worst(period: Period, f: Filters, *, now: datetime, limit: int = WORST_SHOWN) -> list[dict]:
    """The ``limit`` calls furthest past their deadline at ``as_of`` (late: by how much they were
    resolved after it; overdue: how far past it they still are), furthest first."""
    as_of = period.as_of(now)
    # The period's own calls of those (the others were opened before it).
    qs = _past_deadline(period, f, as_of).filter(started_at__gte=period.start, started_at__lt=period.end)
    past = ExpressionWrapper(terms.ended(as_of) - F("deadline"), output_field=DurationField())
    ranked = qs.annotate(past=past, late=terms.flag(terms.resolved_by(as_of))).order_by("-past", "id")[:limit]
    rows = []
    for r in ranked.values(*_PAST_COLUMNS, "past", "late"):
        late = r.pop("late")
        rows.append({**r, "resolved_at": r["resolved_at"] if late else None, "status": "late" if late else "overdue", "past_deadline_s": terms.seconds(r.pop("past"))})
    return rows


def trend(period: Period, f: Filters, *, now: datetime) -> list[dict]:
    """Per UTC day (or week, ``Period.buckets``): calls opened in it, calls resolved in it (whenever
    they were opened), and calls overdue at its end (at ``as_of`` for the bucket holding it; none
    for buckets after it)."""
    as_of = period.as_of(now)
    buckets = period.buckets()
    base = _uncertain(f)
    opened = _count(_groups(period, f, now), "bucket")
    # Resolved in the period: the period's own calls from the grouped read, the others (opened
    # before it) by a statement of their own, which the index on start times narrows.
    resolved = _count(_groups(period, f, now), "resolved_bucket", where=lambda g: g["resolved_bucket"] is not None)
    others = base.filter(_resolved_in(period, as_of)).filter(Q(started_at__lt=period.start) | Q(started_at__gte=period.end))
    resolved.update(dict(others.values_list(terms.bucket("resolved_at", buckets)).annotate(n=Count("id"))))
    overdue = _overdue_at_ends(period, f, as_of, buckets)
    return [{"start": b0, "end": b1, "opened": opened[i], "resolved": resolved[i], "overdue_at_end": overdue.get(i)} for i, (b0, b1) in enumerate(buckets)]


def _overdue_at_ends(period: Period, f: Filters, as_of: datetime, buckets: list[tuple[datetime, datetime]]) -> dict[int, int]:
    """How many calls were overdue at the end of each trend bucket before ``as_of`` (at ``as_of``
    for the bucket holding it): past their deadline then, and not resolved by then.

    Buckets are whole UTC days (or weeks of them) from the period's start, so a call is overdue at
    the end of the bucket holding its deadline's day (the first bucket, for a deadline before the
    period) and of every bucket after it, up to the one holding the day it was resolved (excluded),
    or to the last if it was not resolved by ``as_of``. The database counts the calls by those two
    days; each count is added over its buckets here."""
    step = buckets[0][1] - buckets[0][0]

    def index(day: datetime) -> int:
        return max(0, (day - period.start) // step)

    days = _past_deadline(period, f, as_of).values_list(TruncDay("deadline", tzinfo=UTC), TruncDay("resolved_at", tzinfo=UTC), terms.flag(terms.resolved_by(as_of)))
    change: Counter = Counter()
    for deadline_day, resolved_day, resolved, n in days.annotate(n=Count("id")):
        first, last = index(deadline_day), index(resolved_day) if resolved else len(buckets)
        if first < last:
            change[first] += n
            change[last] -= n
    out, overdue = {}, 0
    for i, (b0, _) in enumerate(buckets):
        if b0 >= as_of:
            break
        overdue += change[i]
        out[i] = overdue
    return out


def people(period: Period, f: Filters, *, now: datetime) -> list[dict]:
    """Per person: the period's calls they settled by a decision, the calls they held (the claim
    each call had last, or has), and how long those waited while claimed (from the claim to the
    resolution, or to ``as_of``): p50 and max in seconds. For staffing, not blame. Two statements of
    its own, as ``_times``: the screen fetches this table on its own too."""
    as_of = period.as_of(now)
    by_person = calls_in(period, f).filter(terms.resolved_by(as_of), resolution_kind="person")
    decided = Counter(dict(by_person.values_list("resolved_by").annotate(n=Count("id"))))
    # From the claim to the resolution, or to as_of (and never below zero).
    wait = Greatest(terms.ended(as_of) - F("claimed_at"), Value(timedelta(0)), output_field=DurationField())
    held = {k: g["wait"] for k, g in terms.ranks(calls_in(period, f), "claimed_by_name", {"wait": (wait, terms.claimed_by(as_of))}).items() if "wait" in g}
    out = []
    for name in sorted(set(decided) | set(held)):
        w = held.get(name, {})
        out.append({"person": name, "decided": decided[name], "claimed": w.get("n", 0), "claimed_wait_p50_s": w.get("p50"), "claimed_wait_max_s": w.get("max")})
    return out


def _breach(met: int, breached: int) -> float | None:
    return round(100 * breached / (met + breached), 1) if met + breached else None


def sla(period: Period, f: Filters, *, now: datetime) -> list[dict]:
    """Per tool: its resolution target (``resolve_within``, or ``deadline`` where its policy names
    none), and of the period's calls how many met it, breached it (resolved after it, or still
    unresolved past it at ``as_of``), are pending, and the breach rate of those judged."""
    targets = _targets()
    counts: dict[str, Counter] = defaultdict(Counter)
    for (tool, status), n in _count(_groups(period, f, now), "tool", "sla_status").items():
        counts[tool][status] += n
    return [
        {"tool": t, "target": "resolve_within" if t in targets else "deadline", "target_s": targets.get(t), "met": c["met"], "breached": c["breached"], "pending": c["pending"], "breach_pct": _breach(c["met"], c["breached"])}
        for t, c in sorted(counts.items())
    ]


def sla_trend(period: Period, f: Filters, *, now: datetime) -> list[dict]:
    """``sla``'s breach rate per trend bucket (``Period.buckets``), of the calls opened in each."""
    rows = [{"start": b0, "end": b1, "met": 0, "breached": 0, "pending": 0, "breach_pct": None} for b0, b1 in period.buckets()]
    for (bucket, status), n in _count(_groups(period, f, now), "bucket", "sla_status").items():
        rows[bucket][status] += n
    for r in rows:
        r["breach_pct"] = _breach(r["met"], r["breached"])
    return rows


DETAIL_COLUMNS = (
    "id", "run_id", "call_id", "tool", "tenant", "risk_class", "idempotency_key", "arguments", "state", "started_at", "first_touch_at",
    "deadline", "resolved_at", "ended", "outcome", "resolved_by", "claimed_by", "deadline_status",
)  # fmt: skip


def detail(period: Period, f: Filters, *, now: datetime, chunk: int = 2000) -> Iterator[dict]:
    """One row per call of the period, in start order, read ``chunk`` rows at a time: the detail
    export. Unmasked (``arguments`` and ``idempotency_key`` as stored): the caller masks them. A call
    resolved after ``as_of`` is shown as it was then: unresolved (state "open"), no resolution."""
    as_of = period.as_of(now)
    for c in calls_in(period, f).annotate(deadline_status=terms.deadline_status(as_of)).order_by("started_at", "id").iterator(chunk_size=chunk):
        done = c.resolved_at is not None and c.resolved_at < as_of
        ended = {"automatic": "automatically", "person": "by a person", "run": "by the run itself"}.get(c.resolution_kind, c.resolution_kind) if done else "still open"
        yield {
            "id": c.id, "run_id": c.run_id, "call_id": c.call_id, "tool": c.tool, "tenant": c.tenant, "risk_class": c.risk_class,
            "idempotency_key": c.idempotency_key, "arguments": c.arguments, "state": c.state if done or c.state != "resolved" else "open",
            "started_at": c.started_at, "first_touch_at": c.first_touch_at if c.first_touch_at and c.first_touch_at < as_of else None,
            "deadline": c.deadline, "resolved_at": c.resolved_at if done else None, "ended": ended,
            "outcome": (DECISION_OF_DISPOSITION.get(c.disposition, c.disposition) if c.resolution_kind == "person" else c.disposition) if done else "",
            "resolved_by": c.resolved_by if done else "", "claimed_by": c.claimed_by_name,
            "deadline_status": c.deadline_status,
        }  # fmt: skip


# The tables, by the name the screen, the CSV files and the API use. ``people`` is for managers only.
TABLES: dict[str, Callable[..., list[dict]]] = {
    "volume": volume,
    "outcomes": outcomes,
    "times-by-risk": times_by_risk,
    "times-by-tool": times_by_tool,
    "deadlines": deadlines,
    "worst": worst,
    "trend": trend,
    "sla": sla,
    "sla-trend": sla_trend,
    "people": people,
}
MANAGERS_ONLY = frozenset({"people"})
_TIMES = ("calls", "touched", "touch_p50_s", "touch_p90_s", "touch_max_s", "resolved", "resolve_p50_s", "resolve_p90_s", "resolve_max_s")
# Each table's columns in order: the CSV header and the API's fields.
COLUMNS: dict[str, tuple[str, ...]] = {
    "volume": ("tool", "uncertain", "recorded", "per_thousand"),
    "outcomes": ("ended", "outcome", "calls"),
    "times-by-risk": ("risk_class", *_TIMES),
    "times-by-tool": ("tool", *_TIMES),
    "deadlines": ("risk_class", "within", "late", "overdue", "open_in_time", "no_deadline", "missed_pct"),
    "worst": ("id", "run_id", "call_id", "tool", "tenant", "risk_class", "started_at", "deadline", "resolved_at", "status", "past_deadline_s"),
    "trend": ("start", "end", "opened", "resolved", "overdue_at_end"),
    "sla": ("tool", "target", "target_s", "met", "breached", "pending", "breach_pct"),
    "sla-trend": ("start", "end", "met", "breached", "pending", "breach_pct"),
    "people": ("person", "decided", "claimed", "claimed_wait_p50_s", "claimed_wait_max_s"),
    "calls": DETAIL_COLUMNS,
}
assert set(COLUMNS) == {*TABLES, "calls"}, "every table of the reports needs its columns"
