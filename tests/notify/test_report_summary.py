"""The managers' summary through the notification channels: the reports' figures for the period and
the one before it, and the calls overdue now, by e-mail and Slack, once per period."""

from __future__ import annotations

import email
from datetime import datetime, timezone

import pytest
from django.core.management import CommandError, call_command

from notify.models import Notification
from notify.summary import summary_body, summary_write
from tests.notify.helpers import deliver_all
from tests.reports.history import history_build

pytestmark = pytest.mark.django_db
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)  # the period: Nov 25 to Dec 1, before it Nov 18 to 24


def test_the_summary_names_the_week_beside_the_week_before_and_the_overdue_calls(routes, smtp):
    history_build()
    body = summary_body(days=7, now=NOW)
    p, q = body["data"]["period"], body["data"]["previous"]
    # Nov 25 to Dec 1: r4 (still open, overdue), e2 and e3 (both in time).
    assert (p["start"], p["end"]) == ("2026-11-25T00:00:00Z", "2026-12-02T00:00:00Z")
    assert (p["uncertain"], p["resolved"], p["still_open"], p["missed_pct"]) == (3, 2, 1, 33.3)
    # Nov 18 to 24: r3 (in time), l2 and p6 (late).
    assert (q["uncertain"], q["resolved"], q["still_open"], q["missed_pct"]) == (3, 3, 0, 66.7)
    assert [c["call_id"] for c in body["data"]["overdue"]] == ["c-r4"]
    ids = summary_write(channels=["oncall-mail", "team-slack"], days=7, now=NOW)
    assert len(ids) == 2 and summary_write(channels=["oncall-mail", "team-slack"], days=7, now=NOW) == []  # once per period
    deliver_all()
    assert Notification.objects.filter(type="report.summary", state="delivered").count() == 2
    mail = email.message_from_bytes(smtp.messages[-1])
    assert mail["Subject"] == "Reckon summary of the last 7 days (2026-11-25 to 2026-12-02 UTC)"
    text = routes.slack[-1]["text"]
    assert "Calls that became uncertain: 3 (previous: 3)" in text and "Missed their deadline: 33.3% (previous: 66.7%)" in text
    assert "Overdue now: 1\n- refund call c-r4 in run run-r4 (acme), deadline 2026-11-29T23:30:00Z http" in text


def test_an_unknown_channel_is_named_and_nothing_is_sent(routes):
    with pytest.raises(CommandError, match="no notification channel named nowhere; nothing was sent"):
        call_command("report_summary", "--notify", "nowhere")
    assert not Notification.objects.filter(type="report.summary").exists()
