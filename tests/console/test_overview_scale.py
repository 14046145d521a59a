"""The overview at scale: its chart and histogram, now counted by bucket, equal their definitions
evaluated call by call; it names the most overdue irreversible calls, counts all of them, and its
number of queries does not depend on how many calls there are."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from console import selectors as console_selectors
from console.views import OVERVIEW_OVERDUE_SHOWN
from recovery.models import UncertainCall
from tests.console.helpers import client_for
from tests.recovery.helpers import RISKS, S

pytestmark = pytest.mark.django_db


def overdue_calls(n: int, *, first: int = 0, risk: str = "irreversible") -> None:
    now = timezone.now()
    UncertainCall.objects.bulk_create(
        UncertainCall(
            run_id=f"run-late-{risk}", call_id=f"c{i}", idempotency_key=f"late-{risk}-{i}", tool="post_correction", start_seq=i + 1,
            started_at=now - timedelta(hours=2), state=UncertainCall.State.ESCALATED, risk_class=risk, deadline=now - timedelta(minutes=i + 1),
        )
        for i in range(first, first + n)
    )


def test_the_overview_names_the_most_overdue_irreversible_calls_and_counts_the_rest(manager):
    overdue_calls(OVERVIEW_OVERDUE_SHOWN + 7)
    overdue_calls(3, risk="reversible")
    body = client_for(manager).get("/overview/").content.decode()
    shown = OVERVIEW_OVERDUE_SHOWN
    assert f"The {shown} most overdue of {shown + 7}." in body
    assert f"All {shown + 7} in the queue" in body and "?risk_class=irreversible" in body
    # The most overdue is the last one made (its deadline passed longest ago); the least, c0, is not shown.
    assert f">c{shown + 6}</a>" in body and ">c0</a>" not in body
    assert "Also past deadline: 3 calls of other risk classes" in body


def test_the_overview_makes_the_same_queries_for_ten_calls_as_for_a_hundred(manager):
    client = client_for(manager)
    counts = []
    for n, first in ((10, 0), (90, 10)):
        overdue_calls(n, first=first)
        with CaptureQueriesContext(connection) as ctx:
            assert client.get("/overview/").status_code == 200
        counts.append(len(ctx.captured_queries))
    assert counts[0] == counts[1]


def test_the_chart_and_the_histogram_equal_the_definitions_evaluated_call_by_call(calls):
    now = calls
    rows = list(UncertainCall.objects.exclude(state=S.IN_FLIGHT).values("risk_class", "state", "started_at", "resolved_at"))
    instants = console_selectors.chart_instants(now=now)
    assert any(r["started_at"] == instants[18] for r in rows)  # the edge case is present
    labels, series = console_selectors.open_calls_over_time(now=now)
    for c in RISKS:
        expected = [
            sum(1 for r in rows if r["risk_class"] == c and r["started_at"] <= t and (r["state"] != S.RESOLVED or r["resolved_at"] > t))
            for t in instants
        ]
        assert series[c] == expected
    assert labels == [t.strftime("%H:%M") for t in instants]
    assert sum(series[c][0] for c in RISKS) < sum(series[c][-1] for c in RISKS)

    hist = console_selectors.open_calls_age_histogram(now=now)
    expected_hist = []
    for lo, hi, label in console_selectors.AGE_BUCKETS:
        n = sum(
            1
            for r in rows
            if r["state"] != S.RESOLVED and r["started_at"] <= now - timedelta(seconds=lo) and (hi is None or r["started_at"] > now - timedelta(seconds=hi))
        )
        expected_hist.append((label, n))
    assert hist == expected_hist
    # The overview's shared scan gives the same answers as each function's own.
    tally = console_selectors.overview_tally(now=now)
    assert console_selectors.open_calls_over_time(now=now, tally=tally) == (labels, series)
    assert console_selectors.open_calls_age_histogram(now=now, tally=tally) == hist


def test_a_long_settled_imported_call_is_not_drawn_as_open_today(v1_runs):
    """An imported history settled in September: its call started and was resolved then, whenever
    the file arrived, so the last 24 hours show nothing open for it."""
    from runs.importer import paths_import
    from tests.console.helpers import FIXTURES

    results = paths_import([str(FIXTURES / "events" / "v2")])
    assert all(r.outcome == "imported" for r in results), [r.line() for r in results]
    settled = UncertainCall.objects.filter(state=S.RESOLVED, started_at__lt=timezone.now() - timedelta(days=30))
    assert settled.exists() and all(c.resolved_at is not None and c.resolved_at < timezone.now() - timedelta(days=30) for c in settled)
    _, series = console_selectors.open_calls_over_time(now=timezone.now())
    open_now = UncertainCall.objects.unresolved().count()
    assert all(sum(series[c][i] for c in RISKS) == open_now for i in range(len(series[RISKS[0]]))), (series, open_now)
