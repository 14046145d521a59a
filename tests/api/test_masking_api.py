"""Sensitive argument fields never leave the API in the clear for callers without view_sensitive:
not in arguments, not in the signature (the arguments as JSON text), not in an error or evidence
that quotes them as JSON, whether read as events, as state (latest or past) or as uncertain calls."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from access.roles import roles_ensure
from recovery.detection import uncertain_calls_detect
from recovery.models import ToolPolicy
from reckon_client.identity import call_key, signature
from runs.leases import lease_acquire, lease_release
from runs.store import NewEvent, events_append
from tests.api.conftest import Api

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "GB29NWBK60161331926819"
ARGS = {"tenant": "acme", "account": SECRET, "amount": 840}


@pytest.fixture
def leaky_run(db):
    """A run whose log quotes the sensitive account in every form the store holds: arguments,
    signatures of a start and a completion, a JSON result, and an attempt whose error and raw
    evidence quote the receiver's JSON; its second call is left uncertain."""
    ToolPolicy.objects.create(tool="post_correction", risk_class="irreversible", strategy="escalate", sensitive_fields=["account"])
    run_id = "run-mask"
    sig = signature("post_correction", ARGS)
    key = call_key(run_id, "post_correction", ARGS)
    other = {**ARGS, "amount": 480}
    other_key = call_key(run_id, "post_correction", other)
    lease = lease_acquire(run_id=run_id, holder="agent")
    events_append(
        run_id=run_id,
        epoch=lease.epoch,
        expected_seq=0,
        events=[
            NewEvent("run_started", {"run_id": run_id}),
            NewEvent("tool_call_started", {"call_id": "c1", "name": "post_correction", "arguments": ARGS, "signature": sig, "idempotency_key": key}),
            NewEvent(
                "tool_call_completed",
                {"call_id": "c1", "name": "post_correction", "content": json.dumps({"account": SECRET, "status": "posted"}), "is_error": False, "signature": sig, "idempotency_key": key},
            ),
            NewEvent("tool_call_started", {"call_id": "c2", "name": "post_correction", "arguments": other, "signature": signature("post_correction", other), "idempotency_key": other_key}),
        ],
    )
    lease_release(run_id=run_id, epoch=lease.epoch)
    uncertain_calls_detect(run_id=run_id)
    lease = lease_acquire(run_id=run_id, holder="reconciler")
    events_append(
        run_id=run_id,
        epoch=lease.epoch,
        expected_seq=5,
        events=[
            NewEvent(
                "reconciliation_attempted",
                {
                    "call_id": "c2",
                    "idempotency_key": other_key,
                    "start_seq": 4,
                    "attempt": 1,
                    "outcome": "unavailable",
                    "evidence": {"raw": json.dumps({"account": SECRET, "error": "busy"}), "observed": {"account": SECRET}},
                    "error": "ledger answered " + json.dumps({"account": SECRET}),
                    "rule": "unavailable: look again later",
                    "next_attempt_in_s": 10,
                },
            )
        ],
    )
    lease_release(run_id=run_id, epoch=lease.epoch)
    return run_id


def _bodies(api: Api, run_id: str) -> dict[str, str]:
    calls = api.get("/api/uncertain-calls", state="all").json()["calls"]
    assert calls, "the second call should be in the queue"
    paths = [
        f"/api/runs/{run_id}/events",
        f"/api/runs/{run_id}/state",
        f"/api/runs/{run_id}/state?at=3",
        "/api/uncertain-calls?state=all",
        *[f"/api/uncertain-calls/{c['id']}" for c in calls],
    ]
    out = {}
    for path in paths:
        r = api.client.get(path, **api.headers)
        assert r.status_code == 200, (path, r.content[:300])
        out[path] = r.content.decode()
    return out


def test_a_token_sees_no_sensitive_value_in_any_read_of_events_state_or_uncertain_calls(leaky_run, reader):
    for path, body in _bodies(reader, leaky_run).items():
        assert SECRET not in body, f"{path} leaks the account"
    started = reader.get(f"/api/runs/{leaky_run}/events").json()["events"][1]["payload"]
    assert started["signature"] == 'post_correction:{"account":"[masked]","amount":840,"tenant":"acme"}'
    completed = reader.get(f"/api/runs/{leaky_run}/events").json()["events"][2]["payload"]
    assert completed["signature"] == started["signature"]
    (call,) = [c for c in reader.get("/api/uncertain-calls", state="all").json()["calls"] if c["call_id"] == "c2"]
    assert call["last_error"] == 'ledger answered {"account":"[masked]"}'


def test_a_user_with_view_sensitive_reads_the_same_documents_unmasked(leaky_run, db):
    from django.contrib.auth.models import Group, User

    roles_ensure()
    user = User.objects.create_user("carla.compliance", password="x")
    user.groups.add(Group.objects.get(name="compliance"))
    client = Client()
    client.force_login(user)
    bodies = _bodies(Api(client), leaky_run)
    assert all(SECRET in body for body in bodies.values()), [p for p, b in bodies.items() if SECRET not in b]


def test_the_api_masks_with_the_consoles_one_masking_function(monkeypatch):
    import recovery.masking
    from access.masking import masked

    seen = []
    monkeypatch.setattr(recovery.masking, "value_mask", lambda value, fields, values=frozenset(): seen.append(value) or "masked by the console's rule")
    assert masked({"account": SECRET}, frozenset({"account"})) == "masked by the console's rule"
    assert seen == [{"account": SECRET}]


def test_an_agents_token_reads_back_exactly_what_it_wrote_so_a_resumed_run_folds_the_live_state(leaky_run, agent):
    from runs.selectors import run_state

    events = agent.get(f"/api/runs/{leaky_run}/events").json()["events"]
    assert events[1]["payload"]["arguments"] == ARGS and SECRET in events[1]["payload"]["signature"]
    state = agent.get(f"/api/runs/{leaky_run}/state").json()
    assert state["completed_calls"] == run_state(run_id=leaky_run).to_dict()["completed_calls"]
