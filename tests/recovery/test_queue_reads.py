"""The queue and the overview read the same answers as before, from index ranges instead of scans.

The queue used to sort every matching call by one CASE expression; it now reads each danger rank as
its own range and merges them. The risk figures used to scan every call; they now count unresolved
calls, resolved ones and overdue ones from partial indexes. These tests hold the new reads to the
old definitions, written out here in full, on a table with every kind of row (possible duplicates,
overdue irreversible calls in each state, resolved ones, ties on the start time, a call started
exactly on a chart instant: tests/console/test_overview_scale.py uses the same table).
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.db.models import Case, IntegerField, Q, Value, When
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from recovery.models import UncertainCall
from recovery.selectors import queue_figures_by_risk, uncertain_calls_filter
from tests.recovery.helpers import RISKS, S

pytestmark = pytest.mark.django_db


def old_danger(now):
    # The ordering the queue had before it was split into ranks: the reference. Rank 1 is an
    # overdue irreversible call, and overdue means open, reconciling or escalated past the deadline:
    # an in-flight call is never overdue (UncertainCall.is_overdue says why), so it is not ranked 1
    # even when the queue is read with state=all.
    return Case(
        When(possible_duplicate=True, then=Value(0)),
        When(Q(risk_class="irreversible") & Q(deadline__lt=now) & Q(state__in=[S.OPEN, S.RECONCILING, S.ESCALATED]), then=Value(1)),
        default=Value(2),
        output_field=IntegerField(),
    )


def walk(page_size: int, **filters) -> list[tuple[int, int]]:
    out, after = [], None
    while True:
        page = uncertain_calls_filter(**filters, after=after, limit=page_size)
        out.extend((row.danger, row.pk) for row in page.items)
        if page.next_cursor is None:
            return out
        after = page.next_cursor


@pytest.mark.parametrize(
    "filters",
    [{}, {"state": "all"}, {"risk_class": "irreversible"}, {"tenant": "acme"}, {"tool": "tool_3", "state": "all"}, {"possible_duplicate": False}, {"min_age_s": 3600}],
    ids=["default", "all-states", "irreversible", "tenant", "tool", "no-duplicates", "min-age"],
)
def test_every_page_of_the_queue_follows_the_old_danger_ordering(calls, filters):
    now = timezone.now()
    states = {"state": "all"} if filters.get("state") == "all" else {}
    expected_qs = UncertainCall.objects.annotate(danger=old_danger(now)).order_by("danger", "started_at", "id")
    expected_qs = expected_qs.filter(state__in=list(S.values) if states else [S.OPEN, S.RECONCILING, S.ESCALATED])
    for key in ("risk_class", "tenant", "tool"):
        if key in filters:
            expected_qs = expected_qs.filter(**{key: filters[key]})
    if "possible_duplicate" in filters:
        expected_qs = expected_qs.filter(possible_duplicate=filters["possible_duplicate"])
    if "min_age_s" in filters:
        expected_qs = expected_qs.filter(started_at__lte=now - timedelta(seconds=filters["min_age_s"]))
    expected = list(expected_qs.values_list("danger", "pk"))
    if not filters:
        assert {d for d, _ in expected} == {0, 1, 2}
    for size in (1, 4, 500):
        assert walk(size, **filters) == expected


def test_the_queue_reads_a_page_in_one_query_on_postgresql_and_at_most_three_elsewhere(calls):
    counts = []
    for size in (2, 5, 50):
        with CaptureQueriesContext(connection) as ctx:
            uncertain_calls_filter(limit=size, state="all")
        # "all" includes calls in flight, which the narrow table holds: at most one read of it more.
        flying = [q for q in ctx.captured_queries if "reckon_in_flight_call" in q["sql"]]
        assert len(flying) <= 1
        counts.append(len(ctx.captured_queries) - len(flying))
    if connection.features.supports_slicing_ordering_in_compound:
        assert counts == [1, 1, 1]
    else:  # one query per danger rank the page reaches, never more than the three ranks
        assert counts[0] == 1 and counts[-1] == 3 and max(counts) <= 3


def test_the_overdue_list_names_the_most_overdue_and_counts_them_all(calls):
    now = timezone.now()  # one clock for both: overdue_s is measured from it
    full = queue_figures_by_risk(now=now)
    short = queue_figures_by_risk(now=now, overdue_limit=2)
    for risk in RISKS:
        assert full[risk]["overdue_count"] == len(full[risk]["overdue"])
        assert short[risk]["overdue_count"] == full[risk]["overdue_count"]
        assert short[risk]["overdue"] == full[risk]["overdue"][:2]
        assert {k: v for k, v in short[risk].items() if k != "overdue"} == {k: v for k, v in full[risk].items() if k != "overdue"}
    assert full["irreversible"]["overdue_count"] > 2


def test_the_risk_figures_equal_counts_over_every_call(calls):
    figures = queue_figures_by_risk()
    became = UncertainCall.objects.exclude(state=S.IN_FLIGHT)
    unresolved = [S.OPEN, S.RECONCILING, S.ESCALATED]
    for risk in RISKS:
        mine = became.filter(risk_class=risk)
        f = figures[risk]
        assert f["opened"] == mine.count()
        assert f["reconciled_automatically"] == mine.filter(state=S.RESOLVED, resolution_kind="automatic").count()
        assert f["escalated"] == mine.filter(escalated_at__isnull=False).count()
        assert f["still_open"] == mine.filter(state__in=unresolved).count()
        first = mine.filter(state__in=unresolved).order_by("started_at").values_list("started_at", flat=True).first()
        assert (f["oldest_age_s"] is None) == (first is None)
