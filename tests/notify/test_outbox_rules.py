"""The outbox's escalation rows, written by its rule table in the append's transaction: the level-1
rows of the route each escalated call matches, its episode kept across a hand-on; on PostgreSQL the
same rows by the SQL generated from that rule (``outbox_rider``), with no round trip of their own."""

from __future__ import annotations

import pytest

from notify.config import notifications_load
from notify.models import Notification, Route
from django.db import connection

from notify.outbox import outbox_project, routes_forget
from recovery.models import UncertainCall
from runs import store
from runs.leases import lease_acquire
from runs.pg import round_trips_count
from runs.store import NewEvent, events_append, events_read

pytestmark = [pytest.mark.django_db]

ROUTES = """
[channels.hook]
kind = "webhook"
url = "http://127.0.0.1:9/hooks"
secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

[channels.mail]
kind = "email"
to = ["oncall@example.com"]

[channels.pager]
kind = "pagerduty"
url = "http://127.0.0.1:9/pd"
routing_key = "R0UT1NGKEY"

[[routes]]
tool = ["wire_transfer"]
tenant = ["acme"]
levels = [{ notify = ["pager"], after = "0m" }]

[[routes]]
risk_class = ["irreversible", "reversible", "idempotent"]
levels = [{ notify = ["hook", "mail"], after = "0m" }, { notify = ["pager"], after = "15m" }]
"""


class Run:
    """A run whose calls became uncertain (full queue rows), plus one call still in flight."""

    def __init__(self, run_id: str):
        self.run_id = run_id
        self.epoch = lease_acquire(run_id=run_id, holder="agent", ttl_seconds=600).epoch
        events = [NewEvent("run_started", {"run_id": run_id})]
        tools = ["post_note", "post_note", "post_note", "post_note", "wire_transfer"]
        for i, tool in enumerate(tools):
            events.append(NewEvent("tool_call_started", {"call_id": f"c{i}", "name": tool, "arguments": {"tenant": "acme", "n": i}, "idempotency_key": f"{run_id}-k{i}"}))
        for i in range(len(tools)):
            events.append(NewEvent("tool_call_uncertain", {"call_id": f"c{i}", "idempotency_key": f"{run_id}-k{i}", "start_seq": i + 2, "reason": "test"}))
        # Started after the others: still in flight (the narrow table) when it is escalated.
        events.append(NewEvent("tool_call_started", {"call_id": "c9", "name": "post_note", "arguments": {"tenant": "acme", "n": 9}, "idempotency_key": f"{run_id}-k9"}))
        self.seq = len(events)
        self.flying_seq = self.seq
        events_append(run_id=run_id, epoch=self.epoch, expected_seq=0, events=events)

    def escalate(self, start_seq: int, **extra) -> None:
        payload = {"call_id": f"c{start_seq - 2}" if start_seq != self.flying_seq else "c9", "idempotency_key": self.key(start_seq), "start_seq": start_seq, "question": "did it happen?", **extra}
        events_append(run_id=self.run_id, epoch=self.epoch, expected_seq=self.seq, events=[NewEvent("approval_requested", payload)])
        self.seq += 1

    def key(self, start_seq: int) -> str:
        return f"{self.run_id}-k{start_seq - 2 if start_seq != self.flying_seq else 9}"

    def rows(self) -> list[tuple]:
        """The run's notifications with what differs between two runs taken out: ids, times (an
        episode's time is checked against its event's), the run's name in the logical key."""
        ts = {e.seq: e.ts for e in events_read(run_id=self.run_id)}
        starts = dict(UncertainCall.objects.filter(run_id=self.run_id).values_list("pk", "start_seq"))
        out = []
        for n in Notification.objects.filter(run_id=self.run_id).order_by("event_seq", "channel"):
            out.append(
                (
                    n.logical_key.replace(self.run_id, "RUN"),
                    n.type,
                    n.action,
                    n.channel,
                    n.kind,
                    starts[n.call_pk],
                    n.tenant,
                    n.event_seq,
                    n.episode_seq,
                    n.episode_at == ts[n.episode_seq],
                    n.cause_at == ts[n.event_seq],
                    n.level,
                    n.repeat,
                    n.extra,
                    n.body,
                    n.state,
                    n.attempts,
                    n.last_error,
                    n.delivery_id.startswith("msg_") and len(n.delivery_id) == 36,
                )
            )
        return out


def _scenario(run: Run) -> None:
    run.escalate(2, reason="conflict")  # the first escalation of a call: a new episode
    run.escalate(3)  # no reason given: "policy"
    run.escalate(4, reason="conflict")
    run.escalate(4, re_escalation=True)  # a person hands it on: the call keeps its reason and episode
    run.escalate(3, re_escalation=True)
    run.escalate(5, reason="overdue")  # call.overdue
    run.escalate(6, reason="conflict")  # wire_transfer for acme: the first route's pager
    run.escalate(run.flying_seq, reason="conflict")  # in flight until now: written by the Python projector


@pytest.fixture
def routes(settings):
    settings.RECKON_NOTIFY_DELIVER_ON_COMMIT = False
    routes_forget()
    notifications_load(text=ROUTES, by="admin")
    yield
    routes_forget()


def test_an_escalation_writes_the_rows_of_the_first_level_of_its_route(routes):
    run = Run("run-outbox")
    _scenario(run)
    rows = run.rows()
    assert len(rows) == 15  # 2 channels x 7 escalations, and the first route's pager once
    assert {r[1] for r in rows} == {"call.escalated", "call.overdue"}
    by_event = {}
    for r in rows:
        by_event.setdefault(r[7], []).append(r)
    # A person's hand-on keeps the call's reason and its episode; the in-flight call is written too.
    first, handed_on = by_event[run.flying_seq + 3], by_event[run.flying_seq + 4]
    assert [(r[3], r[8], r[13]["reason"]) for r in handed_on] == [("hook", first[0][8], "conflict"), ("mail", first[0][8], "conflict")]
    assert all(r[9] and r[10] and r[15] == "pending" and r[18] for r in rows)
    assert [r[3] for r in by_event[run.flying_seq + 7]] == ["pager"]
    assert [r[5] for r in by_event[run.seq]] == [run.flying_seq, run.flying_seq]


postgres_only = pytest.mark.skipif(connection.vendor != "postgresql", reason="riders are PostgreSQL's (SQLite always takes the Python path)")


@postgres_only
def test_an_escalation_writes_in_its_statement_the_rows_the_python_rule_writes(routes, monkeypatch):
    riding = Run("run-rider-sql")
    _scenario(riding)
    monkeypatch.delitem(store._RIDER_FORMS, outbox_project)
    python = Run("run-rider-py")
    _scenario(python)
    assert riding.rows() == python.rows()
    assert len(python.rows()) == 15


@postgres_only
def test_an_escalation_with_routes_loaded_makes_no_round_trip_more_than_without(routes):
    run = Run("run-rider-count")
    run.escalate(2, reason="conflict")  # statements prepared
    with_routes = round_trips_count(lambda: run.escalate(3, reason="conflict"))
    Route.objects.all().delete()
    routes_forget()
    run.escalate(4, reason="conflict")
    without = round_trips_count(lambda: run.escalate(5, reason="conflict"))
    assert Notification.objects.filter(run_id=run.run_id, event_seq=run.seq - 2).count() == 2  # the counted escalation paged
    assert with_routes == without
