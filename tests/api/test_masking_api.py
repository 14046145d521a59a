"""Sensitive argument fields never leave the API in the clear for callers without view_sensitive:
not in arguments, not in the signature (the arguments as JSON text), not in an error or evidence
that quotes them as JSON, whether read as events, as state (latest or past) or as uncertain calls."""

from __future__ import annotations


import pytest
from django.test import Client

from access.roles import roles_ensure
from tests.api.helpers import Api
from tests.api.helpers import ARGS, SECRET, _bodies

pytestmark = pytest.mark.django_db(transaction=True)


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
