"""Leases, the fenced append, events by page, runs and folded state over HTTP."""

from __future__ import annotations

import pytest

from runs.models import LeaseRecord
from tests.api.helpers import _start

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_agent_acquires_a_lease_and_appends_a_batch(agent):
    lease = _start(agent)
    assert lease["epoch"] == 1 and lease["last_seq"] == 0
    r = agent.post("/api/runs/run-api-1/events", {"epoch": 1, "expected_seq": 1, "events": [{"type": "user_message", "payload": {"content": f"m{i}"}} for i in range(3)]})
    assert r.status_code == 201
    assert r.json() == {"run_id": "run-api-1", "epoch": 1, "first_seq": 2, "last_seq": 4}


def test_it_rejects_a_stale_epoch_with_409_naming_the_current_epoch_and_last_seq(agent):
    _start(agent)
    agent.post("/api/runs/run-api-1/lease/release", {"epoch": 1})
    assert agent.post("/api/runs/run-api-1/lease", {"holder": "agent-2"}).json()["epoch"] == 2
    r = agent.post("/api/runs/run-api-1/events", {"epoch": 1, "expected_seq": 1, "events": [{"type": "user_message", "payload": {"content": "late"}}]})
    assert r.status_code == 409
    body = r.json()
    assert body["code"] == "stale_epoch" and body["current_epoch"] == 2 and body["last_seq"] == 1
    assert LeaseRecord.objects.filter(run_id="run-api-1", kind="fenced").count() == 1


def test_it_rejects_a_seq_conflict_with_409_and_writes_nothing(agent):
    _start(agent)
    r = agent.post("/api/runs/run-api-1/events", {"epoch": 1, "expected_seq": 5, "events": [{"type": "user_message", "payload": {"content": "x"}}]})
    assert r.status_code == 409 and r.json()["code"] == "seq_conflict" and r.json()["last_seq"] == 1
    assert agent.get("/api/runs/run-api-1").json()["last_seq"] == 1


def test_a_second_finish_is_409_not_500(agent):
    _start(agent)
    ok = agent.post("/api/runs/run-api-1/events", {"epoch": 1, "expected_seq": 1, "events": [{"type": "run_finished", "payload": {"outcome": "done"}}]})
    assert ok.status_code == 201
    r = agent.post("/api/runs/run-api-1/events", {"epoch": 1, "expected_seq": 2, "events": [{"type": "run_finished", "payload": {"outcome": "again"}}]})
    assert r.status_code == 409 and r.json()["code"] == "run_finished"
    # Nor does a finished run take the agent's own work: a tool call's start, say.
    start = {"type": "tool_call_started", "payload": {"call_id": "c1", "name": "post_note", "arguments": {"n": 1}}}
    r = agent.post("/api/runs/run-api-1/events", {"epoch": 1, "expected_seq": 2, "events": [start]})
    assert r.status_code == 409 and r.json()["code"] == "run_finished" and "an agent's own events" in r.json()["detail"], r.json()
    assert agent.get("/api/runs/run-api-1").json()["last_seq"] == 2


def test_a_held_lease_is_409_with_its_holder_and_expiry_never_its_epoch(agent):
    _start(agent)
    r = agent.post("/api/runs/run-api-1/lease", {"holder": "intruder"})
    body = r.json()
    assert r.status_code == 409 and body["holder"] == "agent-1" and body["held_by"] == "token 'billing agent'" and body["expires_at"]
    assert "current_epoch" not in body and "epoch" not in body["detail"]


def test_an_unknown_event_type_is_422_naming_it(agent):
    _start(agent)
    r = agent.post("/api/runs/run-api-1/events", {"epoch": 1, "expected_seq": 1, "events": [{"type": "teleported", "payload": {}}]})
    assert r.status_code == 422 and "teleported" in r.json()["detail"]


def test_events_come_back_by_page_and_state_at_any_seq(agent, reader):
    _start(agent)
    agent.post("/api/runs/run-api-1/events", {"epoch": 1, "expected_seq": 1, "events": [{"type": "user_message", "payload": {"content": f"m{i}"}} for i in range(5)]})
    page = reader.get("/api/runs/run-api-1/events", after=0, limit=4).json()
    assert [e["seq"] for e in page["events"]] == [1, 2, 3, 4] and page["next_after"] == 4
    page = reader.get("/api/runs/run-api-1/events", after=4, limit=4).json()
    assert [e["seq"] for e in page["events"]] == [5, 6] and page["next_after"] is None
    state = reader.get("/api/runs/run-api-1/state", at=3).json()
    assert state["last_seq"] == 3 and [m["content"] for m in state["messages"]] == ["m0", "m1"]


def test_runs_are_listed_newest_first_with_filters_and_a_cursor(agent, reader):
    for i in range(3):
        _start(agent, run_id=f"run-list-{i}")
    first = reader.get("/api/runs", limit=2).json()
    assert len(first["runs"]) == 2 and first["next_cursor"]
    rest = reader.get("/api/runs", limit=2, cursor=first["next_cursor"]).json()
    assert {r["run_id"] for r in first["runs"] + rest["runs"]} == {"run-list-0", "run-list-1", "run-list-2"}
    assert reader.get("/api/runs", run_id_prefix="run-list-1").json()["runs"][0]["run_id"] == "run-list-1"
    assert reader.get("/api/runs", finished=True).json()["runs"] == []


def test_without_credentials_it_is_401_and_a_read_token_cannot_append(outsider, reader, agent):
    _start(agent)
    assert outsider.get("/api/runs").status_code == 401
    assert outsider.post("/api/runs/run-api-1/lease", {"holder": "x"}).status_code == 401
    r = reader.post("/api/runs/run-api-1/lease", {"holder": "x"})
    assert r.status_code == 403 and "append" in r.json()["detail"]


def test_a_missing_run_is_404(reader):
    assert reader.get("/api/runs/nope").status_code == 404
    assert reader.get("/api/runs/nope/state").status_code == 404


def test_sensitive_fields_are_masked_for_tokens(agent, reader):
    from recovery.models import ToolPolicy

    ToolPolicy.objects.create(tool="post_correction", risk_class="irreversible", strategy="escalate", sensitive_fields=["account"])
    _start(agent)
    agent.post("/api/runs/run-api-1/events", {"epoch": 1, "expected_seq": 1, "events": [
        {"type": "tool_call_started", "payload": {"call_id": "c1", "name": "post_correction", "arguments": {"account": "C-771", "amount": 840}}},
    ]})
    started = reader.get("/api/runs/run-api-1/events").json()["events"][1]["payload"]
    assert started["arguments"] == {"account": "[masked]", "amount": 840}
    assert reader.get("/api/runs/run-api-1/state").json()["uncertain_calls"][0]["arguments"]["account"] == "[masked]"


def _call(tenant, arg_tenant, call_id="c1"):
    return {"type": "tool_call_started", "payload": {"call_id": call_id, "name": "post_correction", "tenant": tenant, "arguments": {"tenant": arg_tenant, "amount": 5}}}


def test_a_call_whose_arguments_name_another_tenant_is_refused_naming_both(agent, tenant_a):
    from runs.models import Event

    lease = _start(agent, "run-two-tenants")
    r = agent.post("/api/runs/run-two-tenants/events", {"epoch": lease["epoch"], "expected_seq": 1, "events": [_call("acme", "initech")]})
    assert r.status_code == 422 and "'acme'" in r.json()["detail"] and "'initech'" in r.json()["detail"], r.content
    # A token of acme alone may not even name initech in the arguments: 403, both tenants named.
    lease = tenant_a.post("/api/runs/run-acme/lease", {"holder": "acme-agent"}).json()
    start = {"type": "run_started", "payload": {"run_id": "run-acme", "tenant": "acme"}}
    r = tenant_a.post("/api/runs/run-acme/events", {"epoch": lease["epoch"], "expected_seq": 0, "events": [start, _call("acme", "initech")]})
    assert r.status_code == 403 and "'acme'" in r.json()["detail"] and "'initech'" in r.json()["detail"], r.content
    assert Event.objects.filter(type="tool_call_started").count() == 0
    r = tenant_a.post("/api/runs/run-acme/events", {"epoch": lease["epoch"], "expected_seq": 0, "events": [start, _call("acme", "acme")]})
    assert r.status_code == 201, r.content


def test_the_store_refuses_two_tenants_in_one_call_for_direct_writers_too(db):
    from runs.errors import InvalidEvent
    from runs.leases import lease_acquire
    from runs.store import NewEvent, events_append

    lease = lease_acquire(run_id="run-direct", holder="script")
    with pytest.raises(InvalidEvent, match="filed under tenant 'acme' but its arguments name tenant 'initech'"):
        events_append(run_id="run-direct", epoch=lease.epoch, expected_seq=0, events=[NewEvent("run_started", {"run_id": "run-direct"}), NewEvent(**_call("acme", "initech"))])
