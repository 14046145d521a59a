"""Every figure of recovery.reports against the known history (tests/reports/history.py), each
expected value counted by hand in the comment beside it."""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone

import pytest
from django.contrib.auth.models import Group, User

from recovery import report_terms, reports
from recovery.models import UncertainCall
from tests.reports.history import DAY0, END, EXPECTED, history_build

pytestmark = pytest.mark.django_db
NOW = datetime(2026, 12, 4, 12, 0, tzinfo=timezone.utc)  # after the period: every figure is as of its end
MIN = 60


@pytest.fixture
def history():
    history_build()
    ann = User.objects.create_user("ann")
    Group.objects.create(name="ledger-team").user_set.add(ann)
    return reports.Period.dates(date(2026, 11, 2), date(2026, 11, 29))


def test_every_table_matches_the_hand_count(history):
    for name in ("volume", "outcomes", "times-by-risk", "times-by-tool", "deadlines", "sla", "people"):
        assert reports.TABLES[name](history, reports.Filters(), now=NOW) == EXPECTED[name], name
    trend = reports.sla_trend(history, reports.Filters(), now=NOW)
    assert {i: (r["met"], r["breached"], r["pending"]) for i, r in enumerate(trend) if r["met"] + r["breached"] + r["pending"]} == EXPECTED["sla-trend"]
    assert [r["breach_pct"] for r in trend][:4] == [0.0, 0.0, 0.0, 100.0] and trend[5]["breach_pct"] is None
    assert [(r["call_id"], r["status"], r["past_deadline_s"]) for r in reports.worst(history, reports.Filters(), now=NOW)] == EXPECTED["worst"]
    assert [(r["start"], r["opened"], r["resolved"], r["overdue_at_end"]) for r in reports.trend(history, reports.Filters(), now=NOW)] == EXPECTED["trend"]


def test_the_period_is_the_utc_days_chosen(history):
    assert (history.start, history.end) == (DAY0, END)
    assert reports.Period.last_days(7, now=datetime(2026, 11, 29, 15, tzinfo=timezone.utc)) == reports.Period(datetime(2026, 11, 23, tzinfo=timezone.utc), END)


def test_volume_counts_uncertain_calls_per_thousand_recorded(history):
    rows = {r["tool"]: r for r in reports.volume(history, reports.Filters(), now=NOW)}
    # pay: p1-p6 and e2 uncertain, plus 3 live starts; refund r1-r4 + 4; lookup l1, l2 + 18.
    assert rows["pay"] == {"tool": "pay", "uncertain": 7, "recorded": 10, "per_thousand": 700.0}
    assert rows["refund"] == {"tool": "refund", "uncertain": 4, "recorded": 8, "per_thousand": 500.0}
    assert rows["lookup"] == {"tool": "lookup", "uncertain": 2, "recorded": 20, "per_thousand": 100.0}
    assert rows["(all)"] == {"tool": "(all)", "uncertain": 13, "recorded": 38, "per_thousand": 342.1}
    acme = {r["tool"]: r for r in reports.volume(history, reports.Filters(tenant="acme"), now=NOW)}
    assert acme["pay"] == {"tool": "pay", "uncertain": 4, "recorded": 7, "per_thousand": 571.4}  # p1 p2 p5 p6 of 4 + 3 live


def test_outcomes_name_each_ending(history):
    got = {(r["ended"], r["outcome"]): r["calls"] for r in reports.outcomes(history, reports.Filters(), now=NOW)}
    assert got == {
        ("automatically", "completed"): 2,  # p4, l2
        ("automatically", "retried"): 1,  # r2
        ("automatically", "not_happened"): 1,  # r1
        ("automatically", "compensated"): 1,  # r3
        ("by a person", "happened"): 1,  # p1
        ("by a person", "retry_same_key"): 1,  # p6
        ("by a person", "not_happened"): 1,  # p2
        ("by a person", "compensate"): 1,  # p3
        ("by the run itself", "completed"): 1,  # l1
        ("still open", ""): 3,  # p5, r4, and e2 (resolved after the period's end)
    }


def test_times_are_nearest_rank_percentiles(history):
    rows = {r["risk_class"]: r for r in reports.times_by_risk(history, reports.Filters(), now=NOW)}
    # irreversible touches 10 20 30 40 5 min -> sorted 5 10 20 30 40: p50 the 3rd, p90 the 5th.
    # resolutions 20 40 95 50 200 -> 20 40 50 95 200.
    assert rows["irreversible"] == {
        "risk_class": "irreversible", "calls": 7,
        "touched": 5, "touch_p50_s": 20 * MIN, "touch_p90_s": 40 * MIN, "touch_max_s": 40 * MIN,
        "resolved": 5, "resolve_p50_s": 50 * MIN, "resolve_p90_s": 200 * MIN, "resolve_max_s": 200 * MIN,
    }  # fmt: skip
    # reversible resolutions 15 45 10 -> 10 15 45: p50 the 2nd, p90 the 3rd; nobody touched them.
    assert rows["reversible"] == {
        "risk_class": "reversible", "calls": 4,
        "touched": 0, "touch_p50_s": None, "touch_p90_s": None, "touch_max_s": None,
        "resolved": 3, "resolve_p50_s": 15 * MIN, "resolve_p90_s": 45 * MIN, "resolve_max_s": 45 * MIN,
    }  # fmt: skip
    # idempotent 5 30: p50 the 1st (ceil 1.0), p90 the 2nd (ceil 1.8).
    assert (rows["idempotent"]["resolve_p50_s"], rows["idempotent"]["resolve_p90_s"]) == (5 * MIN, 30 * MIN)
    tools = {r["tool"]: r for r in reports.times_by_tool(history, reports.Filters(), now=NOW)}
    assert tools["pay"]["resolve_p90_s"] == 200 * MIN and tools["refund"]["resolve_p50_s"] == 15 * MIN


def test_resolve_within_must_be_a_duration_of_a_second_or_more(db):
    from recovery.policies import PolicyError, policies_parse

    assert policies_parse('[tools.t]\nrisk_class = "reversible"\nstrategy = "escalate"\nresolve_within = "2h"\n')[0].resolve_within_s == 7200
    for bad, words in (('"soon"', "resolve_within: 'soon' is not a duration"), ('"0s"', "must be at least 1s")):
        with pytest.raises(PolicyError, match=words):
            policies_parse(f'[tools.t]\nrisk_class = "reversible"\nstrategy = "escalate"\nresolve_within = {bad}\n')


def test_percentile_is_nearest_rank():
    assert report_terms.percentile_rank(50, 4) == 2  # ceil(2.0): the 2nd of [1, 2, 3, 4]
    assert report_terms.percentile_rank(90, 10) == 9
    assert report_terms.percentile_rank(90, 1) == 1 and report_terms.percentile_rank(50, 1) == 1
    assert report_terms.percentile_rank(90, 11) == 10  # ceil(9.9)


def test_deadline_performance_per_risk_class(history):
    rows = {r["risk_class"]: r for r in reports.deadlines(history, reports.Filters(), now=NOW)}
    # pay (60 min): within p1 p2 p4, late p3 (95) p6 (200), overdue p5, in time e2 (due after the end).
    assert rows["irreversible"] == {"risk_class": "irreversible", "within": 3, "late": 2, "overdue": 1, "open_in_time": 1, "no_deadline": 0, "missed_pct": 50.0}
    assert rows["reversible"] == {"risk_class": "reversible", "within": 2, "late": 1, "overdue": 1, "open_in_time": 0, "no_deadline": 0, "missed_pct": 50.0}
    assert rows["idempotent"] == {"risk_class": "idempotent", "within": 1, "late": 1, "overdue": 0, "open_in_time": 0, "no_deadline": 0, "missed_pct": 50.0}


def test_the_worst_are_furthest_past_their_deadline(history):
    rows = reports.worst(history, reports.Filters(), now=NOW)
    # p5 overdue from day 15 11:00 to the end; p6 140 min late; p3 35; r4 overdue 30; l2 20; r2 15.
    assert [(r["call_id"], r["status"], r["past_deadline_s"]) for r in rows] == [
        ("c-p5", "overdue", (12 * 86400 + 13 * 3600)),
        ("c-p6", "late", 140 * MIN),
        ("c-p3", "late", 35 * MIN),
        ("c-r4", "overdue", 30 * MIN),
        ("c-l2", "late", 20 * MIN),
        ("c-r2", "late", 15 * MIN),
    ]
    assert rows[0]["id"] == UncertainCall.objects.get(call_id="c-p5").id


def test_the_trend_is_per_utc_day(history):
    rows = reports.trend(history, reports.Filters(), now=NOW)
    assert [r["start"] for r in rows] == [DAY0 + timedelta(days=i) for i in range(28)]
    opened = {i: r["opened"] for i, r in enumerate(rows) if r["opened"]}
    assert opened == {0: 1, 1: 1, 2: 1, 3: 1, 4: 1, 8: 1, 9: 1, 15: 1, 16: 1, 20: 1, 22: 1, 27: 2}
    resolved = {i: r["resolved"] for i, r in enumerate(rows) if r["resolved"]}
    assert resolved == {0: 2, 1: 1, 2: 1, 3: 1, 4: 1, 8: 1, 9: 1, 16: 1, 20: 1, 22: 1}  # day 0: p1 and e1
    # p5 is overdue from day 15 on; r4 joins it on the last day.
    assert [r["overdue_at_end"] for r in rows] == [0] * 15 + [1] * 12 + [2]


def test_a_long_period_is_drawn_per_week(history):
    period = reports.Period.dates(date(2026, 11, 2), date(2026, 12, 27))  # 56 days
    rows = reports.trend(period, reports.Filters(), now=NOW)
    assert [r["start"].date() for r in rows] == [date(2026, 11, 2) + timedelta(weeks=i) for i in range(8)]
    assert [r["opened"] for r in rows] == [5, 2, 3, 3, 1, 0, 0, 0]  # week 4 holds r4 and e2, week 5 e3
    # Weeks after now (Dec 4) have no overdue figure; the week holding now is counted at now.
    assert [r["overdue_at_end"] for r in rows] == [0, 0, 1, 2, 2, None, None, None]


def test_people_and_their_claimed_waits(history):
    rows = {r["person"]: r for r in reports.people(history, reports.Filters(), now=NOW)}
    # ann decided p1 p2 p6 and held them 10, 20 and 195 minutes; bob decided p3 (held 65 min) and
    # holds p5 from day 15 10:40 to the end.
    assert rows["ann"] == {"person": "ann", "decided": 3, "claimed": 3, "claimed_wait_p50_s": 20 * MIN, "claimed_wait_max_s": 195 * MIN}
    assert rows["bob"] == {"person": "bob", "decided": 1, "claimed": 2, "claimed_wait_p50_s": 65 * MIN, "claimed_wait_max_s": 12 * 86400 + 13 * 3600 + 20 * MIN}


def test_filters_narrow_every_table(history):
    team = reports.Filters(team="ledger-team")
    assert sum(r["calls"] for r in reports.outcomes(history, team, now=NOW)) == 3  # ann's p1 p2 p6
    risky = reports.Filters(risk_class="reversible", tenant="acme")
    assert [r["call_id"] for r in reports.worst(history, risky, now=NOW)] == ["c-r4"]
    with pytest.raises(reports.ReportError, match="risk_class"):
        reports.Filters(risk_class="dangerous")
    with pytest.raises(reports.ReportError, match="team 'nobody'"):
        reports.Filters(team="nobody")


def test_a_call_opened_before_the_period_counts_only_as_resolved_in_it(history):
    ids = set(reports.calls_in(history, reports.Filters()).values_list("call_id", flat=True))
    assert "c-e1" not in ids and "c-e3" not in ids and "c-e2" in ids
    first_day = reports.trend(history, reports.Filters(), now=NOW)[0]
    assert first_day["resolved"] == 2 and first_day["opened"] == 1  # e1's resolution counts; its opening does not
    e2 = next(r for r in reports.detail(history, reports.Filters(), now=NOW) if r["call_id"] == "c-e2")
    assert (e2["ended"], e2["resolved_at"], e2["deadline_status"]) == ("still open", None, "open, in time")


def test_a_period_still_running_counts_as_of_now(history):
    now = datetime(2026, 11, 2, 10, 15, tzinfo=timezone.utc)  # p1 claimed at 10:10, decided at 10:20
    got = {(r["ended"], r["outcome"]): r["calls"] for r in reports.outcomes(history, reports.Filters(), now=now)}
    assert got[("still open", "")] == 13 and got[("by a person", "happened")] == 0
    rows = {r["risk_class"]: r for r in reports.times_by_risk(history, reports.Filters(), now=now)}
    assert (rows["irreversible"]["touched"], rows["irreversible"]["resolved"]) == (1, 0)


def test_the_migration_fills_first_touch_from_what_a_row_still_knows(history):
    """recovery 0009 on rows that existed before the column: the current claim, or a person's
    resolution, whichever came first; nothing for a call nobody touched."""
    from importlib import import_module

    from django.apps import apps

    UncertainCall.objects.update(first_touch_at=None)
    import_module("recovery.migrations.0009_first_touch_at")._backfill(apps, None)
    got = dict(UncertainCall.objects.filter(call_id__in=["c-p1", "c-p5", "c-r1"]).values_list("call_id", "first_touch_at"))
    assert got["c-p1"] == DAY0 + timedelta(hours=10, minutes=10)  # claimed at 10:10, decided at 10:20
    assert got["c-p5"] == DAY0 + timedelta(days=15, hours=10, minutes=40)  # claimed, never decided
    assert got["c-r1"] is None  # settled by a rule


def test_a_tool_or_tenant_filter_gives_that_tools_or_tenants_share_of_the_unfiltered_volume(history):
    # The recorded calls are counted in the event log, filtered by the start's own keys: on SQLite a
    # filter on a key's text annotation read the value as JSON and failed on any stored start.
    whole = {r["tool"]: r for r in reports.volume(history, reports.Filters(), now=NOW)}
    tools = [t for t in whole if t != "(all)"]
    assert len(tools) == 3 and all(whole[t]["recorded"] > 0 for t in tools)
    for tool in tools:
        rows = {r["tool"]: r for r in reports.volume(history, reports.Filters(tool=tool), now=NOW)}
        assert rows[tool] == whole[tool] and rows["(all)"]["recorded"] == whole[tool]["recorded"]
    by_tenant = [reports.volume(history, reports.Filters(tenant=t), now=NOW)[-1]["recorded"] for t in ("acme", "globex")]
    assert all(n > 0 for n in by_tenant) and sum(by_tenant) == whole["(all)"]["recorded"]
