"""Pins masking for console users who read the API with their session (signed in with a password,
no token): without view_sensitive they see the sensitive fields masked; with it, in the clear."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User
from django.http import HttpRequest
from django.test import Client

from access.roles import roles_ensure
from tests.api.helpers import ARGS, SECRET, Api, _bodies

pytestmark = pytest.mark.django_db(transaction=True)

PASSWORD = "correct horse battery staple"


def signed_in(username: str, group: str) -> Api:
    roles_ensure()
    user = User.objects.create_user(username, password=PASSWORD)
    user.groups.add(Group.objects.get(name=group))
    client = Client()
    # django-axes checks every sign-in against its lockouts and needs the request to do so.
    assert client.login(request=HttpRequest(), username=username, password=PASSWORD)
    return Api(client)  # no Authorization header: the session cookie is the only credential


def _call_id(api: Api, call_id: str) -> int:
    (call,) = [c for c in api.get("/api/uncertain-calls", state="all").json()["calls"] if c["call_id"] == call_id]
    return call["id"]


@pytest.mark.parametrize("group", ["oncall", "manager"])
def test_it_masks_sensitive_fields_for_a_signed_in_user_without_view_sensitive(leaky_run, group):
    api = signed_in(f"pat.{group}", group)
    assert not User.objects.get(username=f"pat.{group}").has_perm("access.view_sensitive")

    r = api.get(f"/api/runs/{leaky_run}/events")
    assert r.status_code == 200
    assert SECRET not in r.content.decode()
    started = r.json()["events"][1]["payload"]
    assert started["arguments"] == {**ARGS, "account": "[masked]"}
    assert started["signature"] == 'post_correction:{"account":"[masked]","amount":840,"tenant":"acme"}'

    r = api.get(f"/api/uncertain-calls/{_call_id(api, 'c2')}")
    assert r.status_code == 200
    assert SECRET not in r.content.decode()
    doc = r.json()
    assert doc["call"]["arguments"]["account"] == "[masked]"
    assert doc["call"]["last_error"] == 'ledger answered {"account":"[masked]"}'

    for path, body in _bodies(api, leaky_run).items():
        assert SECRET not in body, f"{path} shows the account to a {group} session"


def test_it_shows_sensitive_fields_unmasked_to_a_signed_in_user_with_view_sensitive(leaky_run):
    api = signed_in("carla.compliance", "compliance")

    started = api.get(f"/api/runs/{leaky_run}/events").json()["events"][1]["payload"]
    assert started["arguments"] == ARGS
    doc = api.get(f"/api/uncertain-calls/{_call_id(api, 'c2')}").json()
    assert doc["call"]["arguments"]["account"] == SECRET
    assert SECRET in doc["call"]["last_error"]
    bodies = _bodies(api, leaky_run)
    assert all(SECRET in body for body in bodies.values()), [p for p, b in bodies.items() if SECRET not in b]
