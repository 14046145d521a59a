"""The role matrix: every console URL (from the URL resolver) and every API operation (from the
OpenAPI document), asked by every kind of caller: an anonymous visitor, each console role, an
administrator, and tokens of each scope (append, read, decide), limited to a tenant and not, plus an
agent's token reading back a run it writes.

For each request it checks three things:
- the status, from a table of expectations by permission: an endpoint missing from the table fails
  the test, so a new one cannot go unchecked;
- that no distinctive sensitive value (tests/access/seed.py: in arguments, signatures, evidence and
  an error quoting the receiver's JSON) appears in the raw bytes of the answer to a caller who may
  not see sensitive values;
- that an access record was written for each answer that does show one unmasked (and none for an
  answer that does not), except for an agent's token reading back its own run.
"""

from __future__ import annotations

import json
import re

import pytest
from django.test import Client
from django.urls import get_resolver, reverse

from access.models import AccessRecord
from access.roles import roles_ensure
from access.services import run_writer_note
from access.tokens import principal_for_token, token_create
from api.instance import api
from tests.access.seed import runs_shown, seed_runs
from tests.console.conftest import _user, client_for
from tests.console.test_permissions import CALL, MATRIX, PUBLIC, RUN

pytestmark = pytest.mark.django_db

SESSIONS = ("anonymous", "oncall", "compliance", "manager", "outsider", "admin")
TOKENS = {  # name: (scopes, tenants)
    "append token": (["append"], []),
    "read token": (["read"], []),
    "decide token": (["decide"], []),
    "append token (acme)": (["append"], ["acme"]),
    "read token (acme)": (["read"], ["acme"]),
    "decide token (acme)": (["decide"], ["acme"]),
    "agent": (["append", "read"], ["acme"]),  # holds run-acme's lease: run-acme is its own run
}
# Who may see sensitive values unmasked: people with view_sensitive, and an agent's token (append).
SEES_VALUES = {"compliance", "admin", "agent"}
OWN_RUNS = {"agent": {"run-acme"}}
# A person who may decide a call may reveal its sensitive fields on its approval screen, one
# recorded reveal at a time (access.masking.may_reveal_on_call): there, and only there, on-call sees values.
DECIDER_REVEALS = {"console:call_reveal": {"oncall"}}

# Every API operation: (the permission it needs, the status a caller holding it gets). Writes are sent
# without their required fields (or, for a policy, a field that does not exist), so a permitted caller
# gets 422 and nothing is written. "admin" is the console's manage_policies (administrators only).
API = {
    ("get", "/api/runs"): ("read", 200),
    ("get", "/api/runs/{run_id}"): ("read", 200),
    ("get", "/api/runs/{run_id}/events"): ("read", 200),
    ("get", "/api/runs/{run_id}/state"): ("read", 200),
    ("post", "/api/runs/{run_id}/lease"): ("append", 422),
    ("post", "/api/runs/{run_id}/lease/renew"): ("append", 422),
    ("post", "/api/runs/{run_id}/lease/release"): ("append", 422),
    ("post", "/api/runs/{run_id}/events"): ("append", 422),
    ("get", "/api/uncertain-calls"): ("read", 200),
    ("get", "/api/uncertain-calls/{pk}"): ("read", 200),
    ("post", "/api/uncertain-calls/{pk}/decisions"): ("decide", 422),
    ("post", "/api/uncertain-calls/{pk}/claim"): ("decide", 422),
    ("get", "/api/policies"): ("read", 200),
    ("get", "/api/policies/{tool}"): ("read", 200),
    ("patch", "/api/policies/{tool}"): ("admin", 422),
}
BODIES = {"post": {}, "patch": {"fields": {"no_such_field": 1}}}
SESSION_SCOPES = {"oncall": {"read", "decide"}, "compliance": {"read"}, "manager": {"read"}, "outsider": set(), "admin": {"read", "decide", "append", "admin"}}


def _api_expected(actor: str, method: str, path: str, target: str) -> int:
    need, ok = API[(method, path)]
    if actor == "anonymous":
        return 401
    if actor in SESSION_SCOPES:
        scopes = SESSION_SCOPES[actor]
        if need not in scopes:
            return 403
        return ok
    scopes, tenants = TOKENS[actor]
    if need == "admin":  # the policy change checks its scope (read) first, then that the caller is an administrator
        return 403
    if need not in scopes:
        return 403
    if tenants and target == "globex" and method == "get" and re.search(r"{(run_id|pk)}", path):
        return 404  # a run or call outside the token's tenants does not exist for it
    return ok


@pytest.fixture
def world(db):
    roles_ensure()
    seeded = seed_runs()
    people = {"oncall": _user("olivia", "oncall"), "compliance": _user("colin", "compliance"), "manager": _user("mandy", "manager")}
    people |= {"outsider": _user("otto"), "admin": _user("ada", is_staff=True, is_superuser=True)}
    clients = {"anonymous": client_for(None)} | {name: client_for(u) for name, u in people.items()}
    tokens = {}
    for name, (scopes, tenants) in TOKENS.items():
        tokens[name], secret = token_create(name=name, scopes=scopes, tenants=tenants)
        clients[name] = Client(HTTP_AUTHORIZATION=f"Bearer {secret}")
    lease = clients["agent"].post("/api/runs/run-acme/lease", json.dumps({"holder": "agent:1"}), content_type="application/json")
    assert lease.status_code == 200, lease.content
    clients["agent"].post("/api/runs/run-acme/lease/release", json.dumps({"epoch": lease.json()["epoch"]}), content_type="application/json")
    # seed_runs plays run-acme's agent through the store; the agent token is the one that began it
    # (a lease of a run someone else began makes no token its writer: finding 5 below).
    run_writer_note(who=principal_for_token(tokens["agent"]), run_id="run-acme")
    return seeded, clients


def _ask(client: Client, method: str, url: str, body=None):
    before = AccessRecord.objects.count()
    if method == "get":
        resp = client.get(url)
    elif body is not None and not isinstance(body, dict) or method in ("post", "patch") and url.startswith("/api/"):
        resp = getattr(client, method)(url, json.dumps(body or {}), content_type="application/json")
    else:
        resp = getattr(client, method)(url, body or {})
    return resp, AccessRecord.objects.count() - before


def _check_disclosure(actor: str, where: str, resp, written: int, problems: list[str], *, also_sees: frozenset = frozenset()) -> bool:
    runs = runs_shown(b"".join(resp.streaming_content) if resp.streaming else resp.content)  # exports stream
    if runs and actor not in SEES_VALUES | also_sees:
        problems.append(f"{where} as {actor}: a sensitive value in the answer")
    exempt = bool(runs) and runs <= OWN_RUNS.get(actor, set())  # only its own run's values
    if runs and not exempt and not written:
        problems.append(f"{where} as {actor}: a sensitive value shown and no access record written")
    if written and not runs:
        problems.append(f"{where} as {actor}: {written} access record(s) for an answer that shows no sensitive value")
    if written and exempt:
        problems.append(f"{where} as {actor}: its own run's values recorded as a disclosure")
    return bool(runs)


def test_every_api_operation_by_every_caller(world):
    seeded, clients = world
    doc = api.get_openapi_schema()
    operations = {(m, p) for p, ops in doc["paths"].items() for m in ops}
    assert operations - set(API) == set(), "add these API operations to the role matrix with the permission they need"
    assert set(API) - operations == set(), "these operations are gone: remove them from the matrix"
    targets = {"acme": {"run_id": "run-acme", "pk": seeded["call"].pk, "tool": "post_correction"}}
    targets["globex"] = {"run_id": "run-globex", "pk": seeded["other_call"].pk, "tool": "post_correction"}
    problems, shown = [], set()
    for (method, path), _ in sorted(API.items()):
        for target, params in targets.items():
            url = re.sub(r"{(\w+)}", lambda m, p=params: str(p[m.group(1)]), path)
            for actor, client in clients.items():
                resp, written = _ask(client, method, url, BODIES.get(method))
                expected = _api_expected(actor, method, path, target)
                if resp.status_code != expected:
                    problems.append(f"{method.upper()} {url} as {actor}: {resp.status_code}, expected {expected}")
                if _check_disclosure(actor, f"{method.upper()} {url}", resp, written, problems):
                    shown.add((actor, method, path))
    assert not problems, "\n".join(problems)
    # The matrix saw values shown where they should be, so the checks above had something to check.
    for actor in ("compliance", "admin", "agent"):
        assert (actor, "get", "/api/runs/{run_id}/events") in shown and (actor, "get", "/api/uncertain-calls/{pk}") in shown, actor


def test_every_console_url_by_every_caller(world):
    seeded, clients = world
    names = {f"console:{n}" for n in get_resolver().namespace_dict["console"][1].reverse_dict if isinstance(n, str)}
    assert names - {name for _, name, *_ in MATRIX} - PUBLIC == set(), "add these console URLs to tests/console/test_permissions.py's MATRIX"
    sub = {RUN: seeded["run"], 11: seeded["seq"], CALL: seeded["call"].pk}
    problems, shown = [], set()
    for method, name, args, data, expected_by_role in MATRIX:
        url = reverse(name, args=[sub.get(a, a) for a in args])
        for actor, client in clients.items():
            expected = expected_by_role.get(actor, 302)  # a token is no console sign-in: to the sign-in page
            resp, written = _ask(client, method, url, data)
            if resp.status_code != expected:
                problems.append(f"{method.upper()} {url} as {actor}: {resp.status_code}, expected {expected}")
            if _check_disclosure(actor, f"{method.upper()} {url}", resp, written, problems, also_sees=frozenset(DECIDER_REVEALS.get(name, ()))):
                shown.add((actor, name))
    assert not problems, "\n".join(problems)
    assert {("compliance", "console:reveal"), ("admin", "console:run_export"), ("oncall", "console:call_reveal"), ("compliance", "console:call_reveal")} <= shown, shown
