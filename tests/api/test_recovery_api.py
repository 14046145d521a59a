"""Uncertain calls, decisions (with Idempotency-Key) and policies over HTTP; token scopes and
tenant limits."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.test import Client

from access.roles import MANAGER, ONCALL, roles_ensure
from recovery.detection import uncertain_calls_detect
from recovery.models import UncertainCall
from runs.leases import lease_acquire, lease_release
from runs.store import NewEvent, events_append, events_read
from tests.recovery.helpers import _uncertain_call

pytestmark = pytest.mark.django_db(transaction=True)


def _decide(api, call, key=None, decision="not_happened", reason="ledger shows nothing"):
    extra = {"HTTP_IDEMPOTENCY_KEY": key} if key else {}
    return api.post(f"/api/uncertain-calls/{call.pk}/decisions", {"decision": decision, "reason": reason, "seen_version": call.version}, **extra)


def test_the_queue_lists_an_uncertain_call_with_its_evidence(reader):
    call = _uncertain_call("run-q-1", "acme")
    page = reader.get("/api/uncertain-calls").json()
    assert [c["id"] for c in page["calls"]] == [call.pk] and page["calls"][0]["state"] == "open"
    detail = reader.get(f"/api/uncertain-calls/{call.pk}").json()
    assert detail["call"]["idempotency_key"] == call.idempotency_key
    assert [h["type"] for h in detail["history"]][:2] == ["tool_call_started", "tool_call_uncertain"]
    assert reader.get("/api/uncertain-calls", risk_class="read_only").json()["calls"] == []


def test_a_decision_through_the_api_appends_to_the_run_log(decider):
    call = _uncertain_call("run-d-1", "acme")
    r = _decide(decider, call)
    assert r.status_code == 200, r.content
    assert r.json()["state"] == "resolved"
    decided = [e.payload for e in events_read(run_id="run-d-1") if e.type == "approval_decided"]
    assert decided and decided[0]["decision"] == "not_happened" and decided[0]["by"] == "api:ops script"


def test_a_decision_on_a_stale_version_is_409(decider):
    call = _uncertain_call("run-d-2", "acme")
    assert _decide(decider, call).status_code == 200
    r = _decide(decider, call)
    assert r.status_code == 409 and r.json()["code"] == "stale_decision"


def test_a_repeated_idempotency_key_returns_the_first_response_and_decides_once(decider):
    call = _uncertain_call("run-i-1", "acme")
    first = _decide(decider, call, key="decide-run-i-1")
    again = _decide(decider, call, key="decide-run-i-1")
    assert first.status_code == again.status_code == 200
    assert again.json() == first.json() and again["Idempotent-Replayed"] == "true"
    assert sum(1 for e in events_read(run_id="run-i-1") if e.type == "approval_decided") == 1


def test_the_same_idempotency_key_with_another_body_is_refused(decider):
    call = _uncertain_call("run-i-2", "acme")
    assert _decide(decider, call, key="k-2").status_code == 200
    r = _decide(decider, call, key="k-2", reason="a different reason")
    assert r.status_code == 422 and "k-2" in r.json()["detail"]


def test_an_append_token_cannot_decide(agent):
    call = _uncertain_call("run-s-1", "acme")
    r = _decide(agent, call)
    assert r.status_code == 403 and "decide" in r.json()["detail"]
    assert UncertainCall.objects.get(pk=call.pk).state == "open"


def test_a_token_of_tenant_a_sees_nothing_of_tenant_b(tenant_a, tenant_b, agent):
    mine = _uncertain_call("run-acme", "acme")
    theirs = _uncertain_call("run-globex", "globex")
    assert [c["id"] for c in tenant_a.get("/api/uncertain-calls").json()["calls"]] == [mine.pk]
    assert tenant_a.get("/api/uncertain-calls", tenant="globex").json()["calls"] == []
    assert tenant_a.get(f"/api/uncertain-calls/{theirs.pk}").status_code == 404
    assert _decide(tenant_a, theirs).status_code == 404
    assert [r["run_id"] for r in tenant_a.get("/api/runs").json()["runs"]] == ["run-acme"]
    for path in ("/api/runs/run-globex", "/api/runs/run-globex/events", "/api/runs/run-globex/state"):
        assert tenant_a.get(path).status_code == 404, path
    assert tenant_a.post("/api/runs/run-globex/lease", {"holder": "acme"}).status_code == 404
    # ... and a new run it opens is its own; an event naming another tenant is refused.
    lease = tenant_a.post("/api/runs/run-acme-2/lease", {"holder": "acme"}).json()
    assert tenant_b.get("/api/runs/run-acme-2").status_code == 404
    r = tenant_a.post(
        "/api/runs/run-acme-2/events",
        {"epoch": lease["epoch"], "expected_seq": 0, "events": [
            {"type": "run_started", "payload": {"run_id": "run-acme-2"}},
            {"type": "tool_call_started", "payload": {"call_id": "x", "name": "post_correction", "arguments": {"tenant": "globex"}}},
        ]},
    )
    assert r.status_code == 403 and "globex" in r.json()["detail"]


def test_a_run_that_touched_two_tenants_is_invisible_to_a_token_of_one(tenant_a, tenant_b, reader):
    # One run, filed under acme, whose agent also started a call for globex: its log holds both
    # tenants' data, so a token of acme alone (or globex alone) sees none of it: not the run, its
    # events, its state, nor either of its calls (even the one filed under acme), and no list
    # names it. A token of all tenants sees it all.
    lease = lease_acquire(run_id="run-both", holder="agent")
    starts = [
        NewEvent("tool_call_started", {"call_id": c, "name": "post_correction", "arguments": {"tenant": t, "account": "C-771", "amount": 840}})
        for c, t in (("c-acme", "acme"), ("c-globex", "globex"))
    ]
    events_append(run_id="run-both", epoch=lease.epoch, expected_seq=0, events=[NewEvent("run_started", {"run_id": "run-both", "tenant": "acme"}), *starts])
    lease_release(run_id="run-both", epoch=lease.epoch)
    uncertain_calls_detect(run_id="run-both")
    calls = {c.call_id: c for c in UncertainCall.objects.filter(run_id="run-both")}
    assert sorted(calls) == ["c-acme", "c-globex"]
    mine = _uncertain_call("run-acme-only", "acme")  # the token does see a run of its own tenant
    for api, tenant in ((tenant_a, "acme"), (tenant_b, "globex")):
        for path in ("/api/runs/run-both", "/api/runs/run-both/events", "/api/runs/run-both/state"):
            assert api.get(path).status_code == 404, (tenant, path)
        for call in calls.values():
            assert api.get(f"/api/uncertain-calls/{call.pk}").status_code == 404, (tenant, call.call_id)
            assert _decide(api, call).status_code == 404, (tenant, call.call_id)
        assert api.post("/api/runs/run-both/lease", {"holder": tenant}).status_code == 404, tenant
        assert "run-both" not in [r["run_id"] for r in api.get("/api/runs").json()["runs"]], tenant
        assert "run-both" not in [r["run_id"] for r in api.get("/api/runs", tenant=tenant).json()["runs"]], tenant
        assert "run-both" not in [c["run_id"] for c in api.get("/api/uncertain-calls").json()["calls"]], tenant
    assert [r["run_id"] for r in tenant_a.get("/api/runs").json()["runs"]] == ["run-acme-only"]
    assert [c["id"] for c in tenant_a.get("/api/uncertain-calls").json()["calls"]] == [mine.pk]
    assert all(UncertainCall.objects.get(pk=c.pk).state == "open" for c in calls.values())
    assert reader.get("/api/runs/run-both").status_code == 200
    assert {c["id"] for c in reader.get("/api/uncertain-calls", tenant="acme").json()["calls"]} == {calls["c-acme"].pk, mine.pk}


def test_a_console_user_decides_by_session_with_csrf(db):
    roles_ensure()
    from django.contrib.auth.models import Group

    user = get_user_model().objects.create_user("oncall-olga", password="x" * 12)
    user.groups.add(Group.objects.get(name=ONCALL))
    call = _uncertain_call("run-u-1", "acme")
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    body = {"decision": "not_happened", "reason": "checked the ledger", "seen_version": call.version}
    r = client.post(f"/api/uncertain-calls/{call.pk}/decisions", body, content_type="application/json")
    assert r.status_code == 403 and "CSRF" in r.json()["detail"]
    client.get("/api/runs")  # any page; the token comes from the cookie Django sets on a form page
    from django.middleware.csrf import _get_new_csrf_string

    token = _get_new_csrf_string()
    client.cookies["csrftoken"] = token
    r = client.post(f"/api/uncertain-calls/{call.pk}/decisions", body, content_type="application/json", HTTP_X_CSRFTOKEN=token)
    assert r.status_code == 200, r.content
    assert [e.payload["by"] for e in events_read(run_id="run-u-1") if e.type == "approval_decided"] == ["oncall-olga"]


def test_policies_are_readable_by_tokens_and_writable_only_by_administrators(reader, db):
    r = reader.client.patch("/api/policies/post_correction", '{"fields": {"risk_class": "irreversible", "strategy": "escalate"}}', content_type="application/json", **reader.headers)
    assert r.status_code == 403
    admin = get_user_model().objects.create_superuser("admin-ada", password="x" * 12)
    client = Client()
    client.force_login(admin)
    r = client.patch("/api/policies/post_correction", '{"fields": {"risk_class": "irreversible", "strategy": "escalate", "deadline": "15m"}}', content_type="application/json")
    assert r.status_code == 200, r.content
    assert r.json()["deadline_s"] == 900 and r.json()["updated_by"] == "admin-ada"
    assert [p["tool"] for p in reader.get("/api/policies").json()] == ["post_correction"]
    bad = client.patch("/api/policies/post_correction", '{"fields": {"strategy": "hope"}}', content_type="application/json")
    assert bad.status_code == 422 and "strategy" in bad.json()["detail"]


def test_an_escalation_through_the_api_is_handed_only_to_someone_who_can_decide(decider, db):
    roles_ensure()
    User = get_user_model()
    User.objects.create_user("mandy.manager").groups.add(Group.objects.get(name=MANAGER))
    User.objects.create_user("olivia.oncall").groups.add(Group.objects.get(name=ONCALL))
    call = _uncertain_call("run-esc-1", "acme")
    body = {"decision": "escalate", "reason": "needs the ledger team", "seen_version": call.version}
    for name in ("nobody.here", "mandy.manager"):
        r = decider.post(f"/api/uncertain-calls/{call.pk}/decisions", {**body, "assignee": name})
        assert r.status_code == 422 and r.json()["code"] == "not_assignable" and name in r.json()["detail"], r.content
    assert not [e for e in events_read(run_id="run-esc-1") if e.type in ("approval_decided", "operator_note")]
    r = decider.post(f"/api/uncertain-calls/{call.pk}/decisions", {**body, "assignee": "olivia.oncall"})
    assert r.status_code == 200 and r.json()["claimed_by"] == "olivia.oncall", r.content
    wrong = decider.post(f"/api/uncertain-calls/{call.pk}/decisions", {"decision": "not_happened", "reason": "x", "seen_version": r.json()["version"], "assignee": "olivia.oncall"})
    assert wrong.status_code == 422 and "assignee is only for" in wrong.json()["detail"]
