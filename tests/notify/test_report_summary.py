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


def _beat(tmp_path, **env) -> tuple[int, str]:
    """Beat's schedule as the settings build it from ``env`` (a fresh process reads the environment)."""
    import json
    import os
    import subprocess
    import sys

    code = (
        "import json, django; django.setup(); from django.conf import settings; e = settings.CELERY_BEAT_SCHEDULE.get('report-summary');"
        "print(json.dumps(e and {'task': e['task'], 'kwargs': e['kwargs'], 'at': [sorted(e['schedule'].day_of_week), sorted(e['schedule'].hour), sorted(e['schedule'].minute)]}))"
    )
    base = {k: v for k, v in os.environ.items() if not k.startswith("RECKON_REPORT_SUMMARY_")}
    out = subprocess.run([sys.executable, "-c", code], env={**base, "RECKON_VAR_DIR": str(tmp_path), "DJANGO_SETTINGS_MODULE": "reckon.settings", **env}, capture_output=True, text=True, timeout=60)
    return out.returncode, (json.loads(out.stdout) if out.returncode == 0 else out.stderr)


def test_beat_sends_the_summary_weekly_only_once_channels_are_named(tmp_path):
    from recovery.reports import PERIOD_DAYS

    assert _beat(tmp_path) == (0, None)  # no channels: no schedule
    code, entry = _beat(tmp_path, RECKON_REPORT_SUMMARY_NOTIFY="oncall-mail, team-slack", RECKON_REPORT_SUMMARY_AT="fri 17:30", RECKON_REPORT_SUMMARY_DAYS="30")
    assert code == 0 and entry == {"task": "notify.tasks.report_summary_send", "kwargs": {"channels": ["oncall-mail", "team-slack"], "days": 30}, "at": [[5], [17], [30]]}
    code, entry = _beat(tmp_path, RECKON_REPORT_SUMMARY_NOTIFY="oncall-mail")
    assert code == 0 and entry["kwargs"]["days"] == 7 and entry["at"] == [[1], [8], [0]]  # Mondays 08:00 UTC by default
    for days in PERIOD_DAYS:  # the settings accept exactly the reports' periods
        assert _beat(tmp_path, RECKON_REPORT_SUMMARY_NOTIFY="m", RECKON_REPORT_SUMMARY_DAYS=str(days))[0] == 0
    code, err = _beat(tmp_path, RECKON_REPORT_SUMMARY_NOTIFY="m", RECKON_REPORT_SUMMARY_DAYS="14")
    assert code != 0 and "RECKON_REPORT_SUMMARY_DAYS=14 must be 7, 30 or 90" in err
    code, err = _beat(tmp_path, RECKON_REPORT_SUMMARY_NOTIFY="m", RECKON_REPORT_SUMMARY_AT="monday 8am")
    assert code != 0 and "RECKON_REPORT_SUMMARY_AT='monday 8am' is not a weekday and a UTC time like 'mon 08:00'" in err


def test_beat_s_task_writes_the_summary_once_per_period(routes):
    from notify.tasks import report_summary_send
    from reckon.celery import app

    app.loader.import_default_modules()
    assert "notify.tasks.report_summary_send" in app.tasks  # the name beat's entry sends
    history_build()
    assert report_summary_send(["oncall-mail", "team-slack"], 7) == 2
    assert report_summary_send(["oncall-mail", "team-slack"], 7) == 0
    assert Notification.objects.filter(type="report.summary").count() == 2
