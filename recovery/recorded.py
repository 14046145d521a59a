"""The recorded calls roll-up: how many tool calls each run recorded per UTC day, tool and tenant.

The reports count "recorded" calls (``recovery.reports.volume``, the denominator of uncertain calls
per thousand) from this read model instead of scanning the period's events. Its one definition is
the rule table ``RECORDED_RULES``: a ``tool_call_started`` that is not Reckon's own retry (no
``retry_of``) counts once, for the UTC day of its timestamp, its tool (``name``) and its tenant
(``tenant``, ``default`` where it names none); every other type counts nothing. Three writers run
that table, so the roll-up is the same whichever wrote it:

- ``recorded_project``, the rule in every append's transaction (``RULE``, in ``runs.rules.ORDER``);
- ``recorded_statement``, the same rows as part of the agent's one-statement start (PostgreSQL),
  and ``recorded_rider``, the same rows riding in a batch's statement (PostgreSQL), both written by
  the upsert ``upsert_sql`` generates for all three;
- ``recorded_rebuild``, from the whole log (``manage.py rebuild_projections``).
"""

from __future__ import annotations

from collections import Counter
from datetime import date, datetime, timezone
from typing import Iterable

from django.db import connection

from recovery.models import RecordedCalls
from runs.events import CURRENT_SCHEMA_VERSION, EventType, rule_table
from runs.fold import Event
from runs.models import Event as EventRow
from runs.rules import ReadModelRule
from runs.store import Rider, StatementPart
from runs.upcasters import DEFAULT_TENANT, events_upcast

Key = tuple[date, str, str]  # (UTC day, tool, tenant)


def _day(ts) -> date:
    if isinstance(ts, str):
        ts = datetime.fromisoformat(ts[:-1] + "+00:00" if ts.endswith("Z") else ts)
    return (ts if ts.tzinfo else ts.replace(tzinfo=timezone.utc)).astimezone(timezone.utc).date()


def _started(ev: Event) -> Key | None:
    p = ev.payload
    if p.get("retry_of") is not None:
        return None  # Reckon's own retry of a call already recorded
    tenant = p.get("tenant")
    return (_day(ev.ts), str(p.get("name")), DEFAULT_TENANT if tenant is None else str(tenant))


RECORDED_RULES = rule_table("recorded calls roll-up", {EventType.TOOL_CALL_STARTED: _started}, ignored=[t for t in EventType if t != EventType.TOOL_CALL_STARTED])


def recorded_keys(run_id: str, events: Iterable[Event]) -> Counter:
    """What ``events`` (as stored, any version) add to the run's roll-up, by (day, tool, tenant)."""
    relevant = [ev for ev in events if ev.type in RECORDED_RULES]
    found: Counter = Counter()
    for ev in events_upcast(relevant, run_id):
        key = RECORDED_RULES[ev.type](ev)
        if key is not None:
            found[key] += 1
    return found


_TABLE = RecordedCalls._meta.db_table


def upsert_sql(rows: int, *, mark: str = "%s", casts: bool = True, run_id: str | None = None, appended: bool = False) -> str:
    """The upsert adding ``rows`` counts to the roll-up, on both engines: parameters (run id, day,
    tool, tenant, calls) per row, each cast to its column's type where ``casts`` (PostgreSQL);
    ``run_id``: SQL giving the run id instead of a parameter (``ev.run_id`` in the append's
    statement); ``appended``: only if the append's statement inserted its events (``ev``)."""
    day, text, number = (f"{mark}::date", f"{mark}::text", f"{mark}::bigint") if casts else (mark, mark, mark)
    values = f"{run_id or text}, {day}, {text}, {text}, {number}"
    source = "VALUES " + ", ".join(f"({values})" for _ in range(rows))
    if run_id:
        source = f"SELECT {values} FROM ev"
    elif appended:
        source = f"SELECT * FROM ({source}) AS counted WHERE EXISTS (SELECT FROM ev)"
    return (
        f"INSERT INTO {_TABLE} (run_id, day, tool, tenant, calls) {source}"
        f" ON CONFLICT (run_id, day, tool, tenant) DO UPDATE SET calls = {_TABLE}.calls + excluded.calls"
    )


def recorded_project(run_id: str, events: list[Event], epoch: int) -> None:
    """The rule applied in the append's transaction: add what ``events`` record to the run's rows."""
    found = recorded_keys(run_id, events)
    if not found:
        return
    pg = connection.vendor == "postgresql"
    params = [v for (day, tool, tenant), n in sorted(found.items()) for v in (run_id, day if pg else day.isoformat(), tool, tenant, n)]
    with connection.cursor() as cur:
        cur.execute(upsert_sql(len(found), casts=pg), params)


def recorded_statement(run_id: str, event: Event) -> StatementPart | None:
    """``recorded_project`` for one event, as part of the append's statement (PostgreSQL): the
    same key, written by the same upsert, with the run id the appended event carries."""
    if event.type not in RECORDED_RULES:
        return StatementPart()
    if event.v != CURRENT_SCHEMA_VERSION:
        return None
    found = recorded_keys(run_id, [event])
    if not found:
        return StatementPart()
    ((key, n),) = found.items()
    return StatementPart(cte=upsert_sql(1, mark="%b", run_id="ev.run_id"), cte_params=(*key, n))


def recorded_rider(run_id: str, events: list[Event]) -> Rider | None:
    """``recorded_project`` for a batch, riding in the append's statement (PostgreSQL) instead of a
    statement of its own: the same rows, by the same upsert, written only if the fence let the
    events in."""
    found = recorded_keys(run_id, events)
    if not found:
        return None
    params = tuple(v for (day, tool, tenant), n in sorted(found.items()) for v in (run_id, day, tool, tenant, n))
    return Rider(cte=upsert_sql(len(found), mark="%b", appended=True), cte_params=params, result="0", result_params=(), then=lambda _: None)


RULE = ReadModelRule("recorded calls", frozenset(RECORDED_RULES), recorded_project, statement=recorded_statement, rider=recorded_rider)


def recorded_rebuild(*, chunk: int = 5000) -> int:
    """Recompute the roll-up from the log (inside the caller's transaction); returns its rows."""
    RecordedCalls.objects.all().delete()
    counts: Counter = Counter()
    starts = EventRow.objects.filter(type__in=sorted(RECORDED_RULES)).order_by().values_list("run_id", "seq", "type", "payload", "ts", "v")
    for run_id, seq, type_, payload, ts, v in starts.iterator(chunk_size=chunk):
        for key, n in recorded_keys(run_id, [Event(seq, type_, payload, ts, v)]).items():
            counts[(run_id, *key)] += n
    RecordedCalls.objects.bulk_create([RecordedCalls(run_id=r, day=d, tool=t, tenant=te, calls=n) for (r, d, t, te), n in counts.items()], batch_size=chunk)
    return len(counts)
