"""The recorded calls roll-up (recovery.recorded): what the appends keep equals what the rebuild
derives from the log, whichever path wrote it (the one-statement start on PostgreSQL, a batch in
Python, an import of version 1 events), and the reports count recorded calls from it."""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import pytest

from recovery import reports
from recovery.models import RecordedCalls
from recovery.rebuild import projections_rebuild
from recovery.recorded import recorded_statement
from runs.fold import Event
from runs.importer import paths_import
from runs.leases import lease_acquire, lease_release
from runs.store import NewEvent, events_append

pytestmark = pytest.mark.django_db

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
UTC = timezone.utc
DAY = datetime(2026, 11, 3, 23, 59, 30, tzinfo=UTC)  # the calls straddle midnight UTC


def _rollup() -> dict:
    return {(r.run_id, r.day, r.tool, r.tenant): r.calls for r in RecordedCalls.objects.all()}


def _start(call_id: str, tool: str, tenant: str | None, ts: datetime, **extra) -> NewEvent:
    payload = {"call_id": call_id, "name": tool, "arguments": {"n": call_id}, "idempotency_key": f"k-{call_id}", **extra}
    if tenant is not None:
        payload["tenant"] = tenant
    return NewEvent("tool_call_started", payload, ts=ts)


def _done(call_id: str, tool: str, ts: datetime) -> NewEvent:
    return NewEvent("tool_call_completed", {"call_id": call_id, "name": tool, "content": "ok", "is_error": False}, ts=ts)


def _append(run_id: str, events: list[NewEvent], *, one_at_a_time: bool) -> None:
    lease = lease_acquire(run_id=run_id, holder="agent")
    seq = 0
    for batch in ([e] for e in events) if one_at_a_time else [events]:
        events_append(run_id=run_id, epoch=lease.epoch, expected_seq=seq, events=batch)
        seq += len(batch)
    lease_release(run_id=run_id, epoch=lease.epoch)


def _calls(run: str) -> list[NewEvent]:
    """Three calls of ``pay`` (one after midnight), one of ``lookup`` for another tenant, and
    Reckon's own retry of the first, which records no new call."""
    return [
        NewEvent("run_started", {"run_id": run}, ts=DAY),
        _start("c1", "pay", "acme", DAY),
        _done("c1", "pay", DAY + timedelta(seconds=1)),
        _start("c2", "pay", "acme", DAY + timedelta(seconds=10)),
        _done("c2", "pay", DAY + timedelta(seconds=11)),
        _start("c3", "lookup", "globex", DAY + timedelta(seconds=20)),
        _done("c3", "lookup", DAY + timedelta(seconds=21)),
        _start("c4", "pay", "acme", DAY + timedelta(seconds=40)),  # 00:00:10 the next day
        _done("c4", "pay", DAY + timedelta(seconds=41)),
        _start("c5", "pay", "acme", DAY + timedelta(seconds=50), retry_of=2),
    ]


def test_the_rollup_the_appends_keep_equals_the_rebuilt_one():
    _append("run-live", _calls("run-live"), one_at_a_time=True)  # the agent's hot path, one event an append
    _append("run-batch", _calls("run-batch"), one_at_a_time=False)  # one append of them all, the rule in Python
    paths_import([str(FIXTURES / "events" / "v1")])  # version 1 events, read through the upcasters
    incremental = _rollup()
    next_day = DAY.date() + timedelta(days=1)
    for run in ("run-live", "run-batch"):
        assert {k[1:]: n for k, n in incremental.items() if k[0] == run} == {
            (DAY.date(), "pay", "acme"): 2,
            (DAY.date(), "lookup", "globex"): 1,
            (next_day, "pay", "acme"): 1,  # the retry (c5) is not counted
        }
    assert any(k[0] == "run-q3-recon" for k in incremental)

    result = projections_rebuild()

    assert _rollup() == incremental
    assert result["recorded"] == len(incremental)


def test_the_one_statement_start_writes_the_rule_s_key_and_a_retry_writes_nothing():
    start = Event(7, "tool_call_started", {"call_id": "c1", "name": "pay", "tenant": "acme", "arguments": {}}, DAY + timedelta(seconds=40))
    part = recorded_statement("run-x", start)
    assert part.cte.startswith("INSERT INTO reckon_recorded_calls") and part.cte_params == (date(2026, 11, 4), "pay", "acme", 1)
    retry = start._replace(payload={**start.payload, "retry_of": 3})
    assert recorded_statement("run-x", retry).cte == ""
    assert recorded_statement("run-x", Event(8, "model_turn", {}, DAY)).cte == ""


def test_the_report_counts_recorded_calls_from_the_rollup_day_by_day():
    _append("run-live", _calls("run-live"), one_at_a_time=True)
    now = DAY + timedelta(days=3)
    first_day = reports.Period.dates(DAY.date(), DAY.date())
    both_days = reports.Period.dates(DAY.date(), DAY.date() + timedelta(days=1))
    rows = {r["tool"]: r["recorded"] for r in reports.volume(first_day, reports.Filters(), now=now)}
    assert rows == {"lookup": 1, "pay": 2, "(all)": 3}
    rows = {r["tool"]: r["recorded"] for r in reports.volume(both_days, reports.Filters(tenant="acme"), now=now)}
    assert rows == {"pay": 3, "(all)": 3}
