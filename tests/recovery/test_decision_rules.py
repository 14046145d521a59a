"""One set of decision rules, whichever front end a person uses.

Every case below is driven through the console's form (POST /calls/{pk}/decide/) and through the
HTTP API (POST /api/uncertain-calls/{pk}/decisions), by the same on-call person, and must get the
same answer: a call that is in flight or resolved is refused with the reason
``UncertainCall.decidable`` gives, and nothing reaches the run's log; an open or escalated call
takes the decision; a decision that is not one of ``Decision`` is refused as a bad request.

Then ``UncertainCall.is_overdue`` and ``UncertainCall.objects.overdue`` are held to each other, and
to the figures, the queue and the API field that use them, on one table of rows.
"""

from __future__ import annotations

import html
import json
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from recovery.decisions import decision_record
from recovery.detection import uncertain_calls_detect
from recovery.models import Decision, UncertainCall
from recovery.reconcile import call_reconcile
from recovery.selectors import queue_figures_by_risk, uncertain_call_get, uncertain_calls_filter
from runs.leases import lease_acquire, lease_release
from runs.models import Event
from runs.store import NewEvent, events_append
from tests.console.helpers import client_for

pytestmark = pytest.mark.django_db

S = UncertainCall.State
FRONT_ENDS = ("console", "api")


# --- calls in each state -----------------------------------------------------------------------


def _started(run_id: str, *, release: bool, detect: bool) -> UncertainCall:
    """A run whose agent started one correction (a tool with no policy: irreversible, escalate)."""
    lease = lease_acquire(run_id=run_id, holder="agent-7", ttl_seconds=300)
    args = {"tenant": "acme", "account": "C-771", "amount": "840.00"}
    start = NewEvent("tool_call_started", {"call_id": "c1", "name": "post_correction", "arguments": args})
    events_append(run_id=run_id, epoch=lease.epoch, expected_seq=0, events=[NewEvent("run_started", {"run_id": run_id}), start])
    if release:
        lease_release(run_id=run_id, epoch=lease.epoch)
    if detect:
        uncertain_calls_detect(run_id=run_id)
    # A call in flight that nothing else happened to is kept in the narrow table: read it the way
    # both front ends do, through the queue's selector.
    (row,) = [r for r in uncertain_calls_filter(state="all", limit=500).items if r.run_id == run_id]
    return row


def in_flight_lease_live(run_id):
    """The agent still holds its lease: it may complete the call any moment."""
    row = _started(run_id, release=False, detect=False)
    assert row.state == S.IN_FLIGHT
    return row


def in_flight_not_yet_detected(run_id):
    """The lease is gone but detection has not run: still in flight, and the run's lease is free, so
    only the decision rule (not a busy lease) stands between a person and the log."""
    row = _started(run_id, release=True, detect=False)
    assert row.state == S.IN_FLIGHT
    return row


def open_call(run_id):
    row = _started(run_id, release=True, detect=True)
    assert row.state == S.OPEN
    return row


def escalated_call(run_id):
    call_reconcile(pk=open_call(run_id).pk)  # no policy: irreversible, strategy escalate
    row = UncertainCall.objects.get(run_id=run_id)
    assert row.state == S.ESCALATED
    return row


def resolved_call(run_id):
    row = open_call(run_id)
    decision_record(pk=row.pk, decision="not_happened", by="dana.oncall", reason="ledger shows nothing", seen_version=row.version)
    row = UncertainCall.objects.get(run_id=run_id)
    assert row.state == S.RESOLVED
    return row


# --- the two front ends ------------------------------------------------------------------------


def submit(front: str, user, call: UncertainCall, decision: str):
    """Post one decision as ``user`` through ``front``: (status, the text a person reads, the body)."""
    data = {"decision": decision, "reason": "checked the ledger by hand", "seen_version": call.version, "evidence_ref": "ledger entry L-1"}
    if front == "console":
        r = client_for(user).post(f"/calls/{call.pk}/decide/", data)
        return r.status_code, html.unescape(r.content.decode()), None
    client = Client()
    client.force_login(user)
    r = client.post(f"/api/uncertain-calls/{call.pk}/decisions", json.dumps(data), content_type="application/json")
    body = r.json()
    return r.status_code, body.get("detail", ""), body


def log_of(run_id: str) -> list[tuple[int, str]]:
    return list(Event.objects.filter(run_id=run_id).order_by("seq").values_list("seq", "type"))


REFUSED = {
    "in_flight_lease_live": (in_flight_lease_live, "still in flight"),
    "in_flight_not_yet_detected": (in_flight_not_yet_detected, "still in flight"),
    "resolved": (resolved_call, "already resolved"),
}


@pytest.mark.parametrize("front", FRONT_ENDS)
@pytest.mark.parametrize("case", list(REFUSED))
def test_a_call_that_may_not_be_decided_is_refused_with_its_reason_by_both_front_ends(front, case, oncall):
    make, words = REFUSED[case]
    call = make(f"run-{case}-{front}")
    reason = call.decidable()
    assert reason is not None and words in reason
    before = log_of(call.run_id)
    status, text, body = submit(front, oncall, call, "not_happened")
    assert status == 409, text
    assert reason in text  # the same sentence, word for word, on either front end
    if front == "api":
        assert body["code"] == "not_decidable" and body["detail"] == reason and body["state"] == call.state
    else:
        assert f"Your decision was not recorded. {reason}" in text  # the refusal names the reason...
        assert 'name="decision"' not in text  # ...and the form stays hidden, the reason in its place
    assert log_of(call.run_id) == before
    row = uncertain_call_get(pk=call.pk)  # a full row, or a call in flight in the narrow table
    assert (row.state, row.version) == (call.state, call.version)


@pytest.mark.parametrize("front", FRONT_ENDS)
@pytest.mark.parametrize("make", [open_call, escalated_call], ids=["open", "escalated"])
@pytest.mark.parametrize("decision", [Decision.NOT_HAPPENED, Decision.ESCALATE])
def test_an_open_or_escalated_call_takes_the_decision_on_both_front_ends(front, make, decision, oncall):
    call = make(f"run-{make.__name__}-{decision}-{front}")
    assert call.decidable() is None
    status, text, body = submit(front, oncall, call, decision)
    assert status == (302 if front == "console" else 200), text
    decided = [e.payload for e in Event.objects.filter(run_id=call.run_id, type="approval_decided")]
    assert [(p["decision"], p["by"]) for p in decided] == [(decision.value, "olivia.oncall")]
    row = UncertainCall.objects.get(pk=call.pk)
    assert row.state == (S.RESOLVED if decision == Decision.NOT_HAPPENED else S.ESCALATED)


@pytest.mark.parametrize("front", FRONT_ENDS)
def test_a_decision_that_is_not_one_of_the_choices_is_a_bad_request_on_both_front_ends(front, oncall):
    call = open_call(f"run-unknown-{front}")
    before = log_of(call.run_id)
    status, text, body = submit(front, oncall, call, "probably_fine")
    if front == "console":
        assert status == 400 and "probably_fine is not one of the options below" in text
    else:
        assert status == 422 and body["code"] == "invalid" and "decision" in text
        assert all(v in text for v in Decision.values)  # the API names what it would accept
    assert log_of(call.run_id) == before


def test_the_service_itself_refuses_an_undecidable_call_whoever_calls_it():
    from recovery.errors import NotDecidable

    for make in (in_flight_not_yet_detected, resolved_call):
        call = make(f"run-service-{make.__name__}")
        before = log_of(call.run_id)
        with pytest.raises(NotDecidable) as refused:
            decision_record(pk=call.pk, decision="happened", by="a-script", reason="sure", seen_version=call.version)
        assert str(refused.value) == call.decidable() and refused.value.state == call.state
        assert log_of(call.run_id) == before


def test_both_front_ends_offer_exactly_the_decisions_of_the_one_list(oncall):
    call = open_call("run-choices")
    page = client_for(oncall).get(f"/calls/{call.pk}/").content.decode()
    offered = [v for v in Decision.values if f'name="decision" value="{v}"' in page]
    assert offered == list(Decision.values) and page.count('name="decision"') == len(Decision.values)
    doc = json.loads(Client().get("/api/openapi.json").content)
    prop = doc["components"]["schemas"]["DecisionIn"]["properties"]["decision"]
    assert prop["enum"] == list(Decision.values)


def test_bulk_actions_skip_an_undecidable_call_with_the_same_reason(oncall):
    from console.services import bulk_preview

    live = in_flight_lease_live("run-bulk-live")
    done = resolved_call("run-bulk-done")
    plan = bulk_preview(rows=[live, done], action="escalate", user=oncall)
    assert [(p["ok"], p["what"]) for p in plan] == [(False, live.decidable()), (False, done.decidable())]


# --- overdue: one definition, in Python and in SQL -----------------------------------------------


@pytest.fixture
def deadlines():
    """Every state with a deadline in the past, in the future and none, all irreversible."""
    now = timezone.now()
    when = {"past": now - timedelta(minutes=5), "future": now + timedelta(minutes=5), "none": None}
    rows = [
        UncertainCall(
            run_id=f"run-{state}-{w}", call_id="c1", idempotency_key=f"k-{state}-{w}", tool="post_correction", start_seq=2,
            started_at=now - timedelta(minutes=30), state=state, risk_class="irreversible", deadline=d,
        )
        for state in S.values
        for w, d in when.items()
    ]
    UncertainCall.objects.bulk_create(rows)
    return now


OVERDUE = {("open", "past"), ("reconciling", "past"), ("escalated", "past")}


def test_is_overdue_and_the_overdue_query_agree_on_every_state_and_deadline(deadlines):
    now = deadlines
    rows = list(UncertainCall.objects.all())
    assert len(rows) == 15
    in_python = {r.run_id for r in rows if r.is_overdue(now)}
    in_sql = set(UncertainCall.objects.overdue(now).values_list("run_id", flat=True))
    assert in_python == in_sql == {f"run-{s}-{w}" for s, w in OVERDUE}
    # An in-flight call past its deadline is not overdue: nobody may decide it yet.
    flying = UncertainCall.objects.get(run_id="run-in_flight-past")
    assert not flying.is_overdue(now) and flying.decidable() is not None


def test_the_figures_the_queue_and_the_api_use_the_same_overdue(deadlines, oncall):
    now = deadlines
    expected = set(UncertainCall.objects.overdue(now).values_list("pk", flat=True))
    figures = queue_figures_by_risk(now=now)["irreversible"]
    assert figures["overdue_count"] == len(expected) and {o["pk"] for o in figures["overdue"]} == expected
    page = uncertain_calls_filter(state="all", limit=500)
    assert {r.pk for r in page.items if r.overdue} == expected
    assert {r.pk for r in page.items if r.danger == 1} == expected  # the queue's "overdue irreversible" rank
    assert all(uncertain_call_get(pk=pk).overdue for pk in expected)
    client = Client()
    client.force_login(oncall)
    listed = client.get("/api/uncertain-calls", {"state": "all", "limit": 500}).json()["calls"]
    assert {c["id"] for c in listed if c["overdue"]} == expected
    one = UncertainCall.objects.get(run_id="run-in_flight-past")
    assert client.get(f"/api/uncertain-calls/{one.pk}").json()["call"]["overdue"] is False
