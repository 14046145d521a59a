"""The access record: written for every unmasked showing of a sensitive value and for nothing else,
before the value leaves, and kept by the database as written."""

from __future__ import annotations

import pytest
from django.db import DatabaseError, IntegrityError, connection, transaction
from django.test import Client

from access.models import AccessRecord
from access.roles import roles_ensure
from access.tokens import token_create
from tests.access.seed import SECRET, seed_runs
from tests.api.helpers import Api
from tests.console.helpers import _user, client_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def seeded(db):
    roles_ensure()
    return seed_runs()


def _token(*scopes, tenants=()):
    _, secret = token_create(name=f"{'+'.join(scopes)} token", scopes=scopes, tenants=tenants)
    return Api(Client(), secret)


def _session(group=None, **extra):
    user = _user(f"{group or 'admin'}.person", group, **extra)
    return Api(client_for(user)), user


def _new_records(since: int) -> list[AccessRecord]:
    return list(AccessRecord.objects.filter(id__gt=since).order_by("id"))


def _last_id() -> int:
    return AccessRecord.objects.order_by("-id").values_list("id", flat=True).first() or 0


# --- the database keeps it as written ---------------------------------------------------------------


def test_the_database_refuses_to_update_or_delete_an_access_record(seeded):
    api, _ = _session("compliance")
    assert api.get("/api/runs/run-acme/events").status_code == 200
    rec = AccessRecord.objects.get()
    for attempt in (
        lambda: AccessRecord.objects.filter(pk=rec.pk).update(why="nothing to see"),
        lambda: AccessRecord.objects.filter(pk=rec.pk).delete(),
        lambda: connection.cursor().execute("UPDATE reckon_access_record SET actor_name = 'someone else'"),
        lambda: connection.cursor().execute("DELETE FROM reckon_access_record"),
    ):
        with pytest.raises((IntegrityError, DatabaseError)) as exc, transaction.atomic():
            attempt()
        assert "append-only" in str(exc.value), exc.value
    rec2 = AccessRecord.objects.get()
    assert (rec2.actor_name, rec2.why) == (rec.actor_name, rec.why)


# --- API reads ---------------------------------------------------------------------------------------


def test_a_compliance_session_reading_events_is_recorded_before_the_answer_with_the_paths_shown(seeded):
    api, user = _session("compliance")
    before = _last_id()
    resp = api.get("/api/runs/run-acme/events")
    assert resp.status_code == 200 and SECRET in resp.content.decode()
    [rec] = _new_records(before)
    assert (rec.actor_kind, rec.actor_id, rec.actor_name, rec.front_end) == ("user", user.pk, "compliance.person", "api")
    assert (rec.run_id, rec.tenant, rec.why) == ("run-acme", "acme", "GET /api/runs/run-acme/events")
    assert f"event {seeded['seq']}.arguments.account" in rec.fields and f"event {seeded['seq']}.signature" in rec.fields


def test_state_and_the_uncertain_call_screens_of_the_api_are_recorded_for_people_who_see_values(seeded):
    api, _ = _session("compliance")
    call = seeded["call"]
    before = _last_id()
    assert SECRET in api.get("/api/runs/run-acme/state").content.decode()
    assert SECRET in api.get(f"/api/uncertain-calls/{call.pk}").content.decode()
    assert SECRET in api.get("/api/uncertain-calls").content.decode()
    state, detail, *listed = _new_records(before)
    assert state.why == "GET /api/runs/run-acme/state" and any(p.startswith("state.") for p in state.fields)
    assert (detail.call_id, detail.idempotency_key) == (call.call_id, call.idempotency_key)
    assert "call.arguments.account" in detail.fields and "call.last_error" in detail.fields
    assert any(p.startswith("attempts.") and "evidence" in p for p in detail.fields), detail.fields
    assert {r.run_id for r in listed} == {"run-acme", "run-globex"}  # one per call shown with values


def test_masked_readers_and_runs_without_sensitive_values_write_nothing(seeded):
    oncall, _ = _session("oncall")
    reader = _token("read")
    compliance, _ = _session("compliance")
    before = _last_id()
    for api in (oncall, reader):
        for url in ("/api/runs/run-acme/events", "/api/runs/run-acme/state", "/api/uncertain-calls", f"/api/uncertain-calls/{seeded['call'].pk}"):
            resp = api.get(url)
            assert resp.status_code == 200 and SECRET not in resp.content.decode(), url
    # A person who may see values, reading what holds none: the run list, a page before the call.
    assert compliance.get("/api/runs").status_code == 200
    assert compliance.get("/api/runs/run-acme/events", after=0, limit=2).status_code == 200
    assert _new_records(before) == []


def test_an_agent_token_reading_back_its_own_run_is_not_recorded_but_another_run_is(seeded):
    agent = _token("append", "read")
    lease = agent.post("/api/runs/run-agent-own/lease", {"holder": "agent:1", "tenant": "acme"})
    assert lease.status_code == 200, lease.content
    args = {"tenant": "acme", "account": SECRET, "amount": "1.00", "currency": "EUR", "period": "2026-Q3", "reference": "C-1"}
    events = [{"type": "run_started", "payload": {"run_id": "run-agent-own", "tenant": "acme"}}, {"type": "tool_call_started", "payload": {"call_id": "c1", "name": "post_correction", "arguments": args, "tenant": "acme"}}]
    assert agent.post("/api/runs/run-agent-own/events", {"epoch": lease.json()["epoch"], "expected_seq": 0, "events": events}).status_code == 201
    before = _last_id()
    assert SECRET in agent.get("/api/runs/run-agent-own/events").content.decode()  # what it wrote, as written
    assert SECRET in agent.get("/api/runs/run-agent-own/state").content.decode()
    assert _new_records(before) == []
    # Taking the lease of a run it did not begin does not make that run its own (issue 31, 5).
    taken = agent.post("/api/runs/run-globex/lease", {"holder": "agent:1"})
    assert taken.status_code == 200, taken.content
    other = agent.get("/api/runs/run-globex/events")
    assert "ACCT-SECRET-0815" in other.content.decode()
    [rec] = _new_records(before)
    assert (rec.actor_kind, rec.actor_name, rec.run_id, rec.tenant) == ("token", "append+read token", "run-globex", "globex")


def test_a_decisions_answer_and_its_idempotent_replay_mask_the_arguments_for_everyone(seeded):
    api, _ = _session(None, is_staff=True, is_superuser=True)
    call = seeded["call"]
    body = {"decision": "escalate", "reason": "to the ledger team", "seen_version": call.version}
    first = api.post(f"/api/uncertain-calls/{call.pk}/decisions", body, HTTP_IDEMPOTENCY_KEY="k-1")
    again = api.post(f"/api/uncertain-calls/{call.pk}/decisions", body, HTTP_IDEMPOTENCY_KEY="k-1")
    assert first.status_code == again.status_code == 200 and again["Idempotent-Replayed"] == "true"
    for resp in (first, again):
        assert SECRET not in resp.content.decode() and '"account": "[masked]"' in resp.content.decode().replace('":"', '": "')



def test_a_claims_answer_masks_the_arguments_for_everyone_and_records_nothing(seeded):
    # A claim is the acknowledgement that stops notifications climbing; its answer is not a read.
    api, _ = _session(None, is_staff=True, is_superuser=True)
    call = seeded["call"]
    since = _last_id()
    resp = api.post(f"/api/uncertain-calls/{call.pk}/claim", {"seen_version": call.version})
    assert resp.status_code == 200, resp.content
    assert SECRET not in resp.content.decode() and '"account": "[masked]"' in resp.content.decode().replace('":"', '": "')
    assert _new_records(since) == []

# --- the console ------------------------------------------------------------------------------------


def test_an_export_of_a_run_without_sensitive_values_is_not_recorded(seeded):
    from runs.leases import lease_acquire
    from runs.store import NewEvent, events_append

    lease = lease_acquire(run_id="run-plain", holder="t")
    events_append(run_id="run-plain", epoch=lease.epoch, expected_seq=0, events=[NewEvent("run_started", {"run_id": "run-plain"})])
    compliance = client_for(_user("colin", "compliance"))
    assert compliance.get("/runs/run-plain/export.jsonl").status_code == 200
    assert not AccessRecord.objects.exists()
    assert SECRET in b"".join(compliance.get("/runs/run-acme/export.csv").streaming_content).decode()
    assert AccessRecord.objects.get().front_end == "export"


def test_the_compliance_screen_filters_and_pages_newest_first(seeded):
    compliance, _ = _session("compliance")
    for _ in range(3):
        compliance.get("/api/runs/run-acme/events")
    compliance.get("/api/runs/run-globex/state")
    c = compliance.client
    from access.selectors import access_records_search

    page = access_records_search(limit=2)
    assert [r.run_id for r in page.items] == ["run-globex", "run-acme"] and page.next_cursor
    rest = access_records_search(limit=2, before=page.next_cursor)
    assert [r.run_id for r in rest.items] == ["run-acme", "run-acme"] and rest.next_cursor is None
    body = c.get("/access/", {"run": "run-globex"}).content.decode()
    assert "GET /api/runs/run-globex/state" in body and "GET /api/runs/run-acme/events" not in body
    assert "No access records match." in c.get("/access/", {"front_end": "export"}).content.decode()
    assert "compliance.person" in c.get("/access/", {"who": "compliance.person", "since": "2000-01-01", "until": "9999-12-31"}).content.decode()
    for bad in ({"before": "nonsense"}, {"since": "yesterday"}, {"front_end": "fax"}, {"who": "a\x00b"}):
        resp = c.get("/access/", bad)
        assert resp.status_code == 400, (bad, resp.status_code)
    # The run's own audit screen lists its records too.
    assert "GET /api/runs/run-acme/events" in c.get("/runs/run-acme/").content.decode()


def test_a_reveal_without_a_reason_or_with_one_that_cannot_be_kept_shows_nothing_and_writes_nothing(seeded):
    c = client_for(_user("colin", "compliance"))
    url = f"/runs/run-acme/events/{seeded['seq']}/reveal/"
    for reason, says in (("", "say why"), ("   ", "say why"), ("x" * 501, "at most 500"), ("ticket\x00", "NUL")):
        resp = c.post(url, {"path": "arguments.account", "reason": reason})
        body = resp.content.decode("utf-8", "replace")
        assert resp.status_code == 400 and says in body and SECRET not in body, (reason[:10], resp.status_code)
    assert not AccessRecord.objects.exists()
