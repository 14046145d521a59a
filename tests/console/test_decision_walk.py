"""The decision log with a per-row filter is read range by range of its time index
(``console.decision_log._decisions_walk``); these tests make the ranges tiny, so that a page, its
"older" links and decisions sharing one time cross many range edges, and expect exactly the
decisions the filter keeps, newest first, each once."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from console import decision_log
from runs.leases import lease_acquire
from runs.store import NewEvent, events_append

pytestmark = pytest.mark.django_db(transaction=True)

T0 = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)


def _decisions(run_id: str, n: int) -> list[tuple[datetime, str, int, str]]:
    """``n`` decisions in one run; every third by alice, the rest by bob or a rule; three at a time
    share one timestamp. Returns (ts, run_id, seq, by) per decision."""
    lease = lease_acquire(run_id=run_id, holder="w", ttl_seconds=60)
    events_append(run_id=run_id, epoch=lease.epoch, expected_seq=0, events=[NewEvent("run_started", {"run_id": run_id})])
    out, seq = [], 1
    for i in range(n):
        ts = T0 + timedelta(seconds=i // 3)
        if i % 3 == 0:
            ev, by = NewEvent("approval_decided", {"call_id": f"c{i}", "approved": True, "decision": "happened", "by": "alice.oncall", "reason": "seen"}, ts=ts), "alice.oncall"
        elif i % 3 == 1:
            ev, by = NewEvent("approval_decided", {"call_id": f"c{i}", "approved": False, "decision": "not_happened", "by": "bob.oncall", "reason": "absent"}, ts=ts), "bob.oncall"
        else:
            ev, by = NewEvent("tool_call_resolved", {"idempotency_key": f"k{i}", "disposition": "completed", "rule": "match: complete from reconciliation"}, ts=ts), ""
        events_append(run_id=run_id, epoch=lease.epoch, expected_seq=seq, events=[ev])
        seq += 1
        out.append((ts, run_id, seq, by))
    return out


def _all_pages(**search) -> list[tuple[datetime, str, int]]:
    got, before = [], None
    while True:
        page = decision_log.decisions_search(**search, before=before, limit=4)
        got += [(e.ts, e.run_id, e.seq) for e in page.items]
        if page.next_cursor is None:
            return got
        before = page.next_cursor


@pytest.mark.parametrize("first", [1, 2, 5])
def test_a_filtered_log_read_in_tiny_ranges_holds_exactly_the_matching_decisions_newest_first(monkeypatch, first):
    monkeypatch.setattr(decision_log, "_WALK_FIRST", first)
    made = _decisions("walk-a", 40) + _decisions("walk-b", 20)
    newest_first = sorted(made, key=lambda d: (d[0], d[1], d[2]), reverse=True)
    alice = [(ts, r, s) for ts, r, s, by in newest_first if by == "alice.oncall"]
    assert _all_pages(by="ALICE") == alice
    rules = [(ts, r, s) for ts, r, s, by in newest_first if not by]
    assert _all_pages(kind="automatic") == rules
    assert _all_pages(by="nobody-at-all") == []
    # One page of the newest alice decisions, as the screen asks for it.
    page = decision_log.decisions_search(by="alice")
    assert [(e.ts, e.run_id, e.seq) for e in page.items] == alice[: decision_log.DECISION_LOG_PAGE]
    # Counted exactly below the cap; a first page that holds every match is its own count.
    assert decision_log.decisions_count(by="alice") == (len(alice), True)
    assert decision_log.decisions_count(by="nobody-at-all", shown=decision_log.decisions_search(by="nobody-at-all")) == (0, True)
    assert decision_log.decisions_count(tool="post") == (None, False)


def test_a_filtered_count_stops_at_its_cap(monkeypatch):
    monkeypatch.setattr(decision_log, "FILTERED_COUNT_CAP", 5)
    made = _decisions("walk-c", 30)
    assert decision_log.decisions_count(by="bob") == (5, False)
    assert decision_log.decisions_count() == (len(made), True)
