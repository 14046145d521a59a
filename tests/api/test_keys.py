"""Keys that do not leak what is masked (schema version 3).

An agent starts a run through the API with its append token and records a call whose sensitive
argument is a four-digit account. Then everything a manager (a console session) and a read token
can read about the run is collected: the API's events, state (latest and past), run, run list and
uncertain calls (list and detail), and the console's run, state, queue and call pages. A brute
force tries every account 0000-9999 against every 24-hex-digit string in those answers, with the
secret-less formula and with every string they contain as a candidate secret. On a version 3 run
it finds nothing; on a version 2 run (no secret) the same search finds the account, which is how
the test knows it can fail.
"""

from __future__ import annotations

import hashlib
import json
import re

import pytest
from django.test import Client

from access.tokens import token_create
from recovery.detection import uncertain_calls_detect
from recovery.models import ToolPolicy
from reckon_client.identity import idempotency_key, signature
from tests.api.helpers import Api

pytestmark = pytest.mark.django_db

ACCOUNT = "4821"
ARGS = {"tenant": "acme", "account": ACCOUNT, "amount": "840.00", "currency": "GBP", "period": "2026-Q3"}
HEX24 = re.compile(r"\b[0-9a-f]{24}\b")


def person(username: str, group: str | None = None, **extra):
    from django.contrib.auth.models import Group, User

    from access.roles import roles_ensure

    roles_ensure()
    user = User.objects.create_user(username, password="x", **extra)
    if group:
        user.groups.add(Group.objects.get(name=group))
    return user


@pytest.fixture
def manager(db):
    return person("mandy.manager", "manager")


@pytest.fixture
def policy(db):
    ToolPolicy.objects.create(tool="post_correction", risk_class="irreversible", strategy="escalate", sensitive_fields=["account"])


def agent_run(agent: Api, run_id: str, *, version: int) -> tuple[str, str | None]:
    """The agent's run through the API: run_started, a call started with its key, then the agent
    dies; detection makes the call uncertain. Returns (key, the secret the agent was given)."""
    assert agent.post(f"/api/runs/{run_id}/lease", {"holder": "agent-1", "ttl_seconds": 30}).status_code == 200
    r = agent.post(f"/api/runs/{run_id}/events", {"epoch": 1, "expected_seq": 0, "events": [{"type": "run_started", "payload": {"run_id": run_id}, "v": version}]})
    assert r.status_code == 201, r.content
    secret = r.json().get("key_secret")
    assert (secret is not None) == (version >= 3)
    sig = signature("post_correction", ARGS)
    key = idempotency_key(run_id, sig, secret)
    start = {"call_id": "c1", "name": "post_correction", "arguments": ARGS, "idempotency_key": key, "signature": sig}
    r = agent.post(f"/api/runs/{run_id}/events", {"epoch": 1, "expected_seq": 1, "events": [{"type": "tool_call_started", "payload": start, "v": version}]})
    assert r.status_code == 201, r.content
    assert agent.post(f"/api/runs/{run_id}/lease/release", {"epoch": 1}).status_code == 204
    uncertain_calls_detect(run_id=run_id)
    return key, secret


def readable(api: Api, run_id: str) -> dict[str, str]:
    """Every answer about the run this caller can read through the API (each must be a 200)."""
    calls = api.get("/api/uncertain-calls", state="all").json()["calls"]
    assert calls, "the call should be in the queue"
    paths = [
        f"/api/runs/{run_id}",
        "/api/runs",
        f"/api/runs/{run_id}/events",
        f"/api/runs/{run_id}/state",
        f"/api/runs/{run_id}/state?at=1",
        f"/api/runs/{run_id}/state?at=2",
        "/api/uncertain-calls?state=all",
        *[f"/api/uncertain-calls/{c['id']}" for c in calls],
    ]
    out = {}
    for path in paths:
        r = api.client.get(path, **api.headers)
        assert r.status_code == 200, (path, r.content[:300])
        out[path] = (b"".join(r.streaming_content) if r.streaming else r.content).decode()  # exports stream
    return out


def console_pages(client: Client, run_id: str) -> dict[str, str]:
    """The console's pages about the run for a signed-in person, exports where their role allows."""
    from recovery.models import UncertainCall

    pk = UncertainCall.objects.get(run_id=run_id).pk
    out = {}
    for path in (f"/runs/{run_id}/", f"/runs/{run_id}/?at=2", f"/runs/{run_id}/state/?at=2", "/queue/", f"/calls/{pk}/", f"/runs/{run_id}/export.jsonl", f"/runs/{run_id}/export.csv"):
        r = client.get(path, HTTP_HX_REQUEST="true") if "/state/" in path else client.get(path)
        if r.status_code == 403 and "/export." in path:
            continue  # this role may not export
        assert r.status_code == 200, (path, r.status_code)
        out[path] = (b"".join(r.streaming_content) if r.streaming else r.content).decode()  # exports stream
    return out


def strings_in(bodies: dict[str, str]) -> set[str]:
    """Every string value (and key) in the JSON answers, and every token of the HTML pages."""
    found: set[str] = set()

    def walk(v):
        if isinstance(v, str):
            found.add(v)
        elif isinstance(v, dict):
            for k, x in v.items():
                found.add(k)
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    for body in bodies.values():
        try:
            walk(json.loads(body))
        except ValueError:
            for line in body.splitlines():  # JSONL and CSV exports, HTML pages
                try:
                    walk(json.loads(line))
                except ValueError:
                    found.update(re.findall(r"[^\s<>\"',=]+", line))
    return found


def brute_force(run_id: str, bodies: dict[str, str]) -> list[str]:
    """The accounts 0000-9999 whose key, under the secret-less formula or with any visible string as
    the secret, is a 24-hex-digit string the answers show."""
    shown_keys = {k for body in bodies.values() for k in HEX24.findall(body)}
    assert shown_keys, "the key itself is shown to this reader"
    candidates = [None, *sorted(strings_in(bodies))]
    found = []
    for n in range(10_000):
        sig = signature("post_correction", {**ARGS, "account": f"{n:04d}"})
        for secret in candidates:
            prefix = f"{secret}|{run_id}|{sig}" if secret is not None else f"{run_id}|{sig}"
            if hashlib.sha256(prefix.encode()).hexdigest()[:24] in shown_keys:
                found.append(f"{n:04d}")
                break
    return found


def manager_and_reader(run_id: str, manager) -> dict[str, str]:
    _, token = token_create(name="dashboard", scopes=["read"])
    reader = Api(Client(), token)
    session = Client()
    session.force_login(manager)
    bodies = {f"read token {p}": b for p, b in readable(reader, run_id).items()}
    bodies.update({f"manager {p}": b for p, b in readable(Api(session), run_id).items()})
    bodies.update({f"manager console {p}": b for p, b in console_pages(session, run_id).items()})
    for label, body in bodies.items():
        assert ACCOUNT not in body, f"{label} shows the masked account itself"
    return bodies


def test_nothing_a_manager_or_a_read_token_can_read_lets_the_masked_account_be_brute_forced(agent, policy, manager):
    run_id = "run-keys-v3"
    key, secret = agent_run(agent, run_id, version=3)
    bodies = manager_and_reader(run_id, manager)
    assert any(key in body for body in bodies.values()), "the key is shown beside the masked arguments"
    assert not [label for label, body in bodies.items() if secret in body], "the run's key secret is shown"
    assert brute_force(run_id, bodies) == []


def test_a_version_2_key_would_give_the_account_away_so_a_manager_and_a_read_token_never_see_it(agent, policy, manager):
    run_id = "run-keys-v2"
    key, _ = agent_run(agent, run_id, version=2)
    # The control: the same brute force finds the account from the whole key of a secret-less run...
    assert brute_force(run_id, {"the key": key}) == [ACCOUNT]
    # ...so neither the key nor a part long enough to test guesses against is shown to them.
    bodies = manager_and_reader(run_id, manager)
    assert not [label for label, body in bodies.items() if key[:8] in body], "a v2 key (or its start) is shown"


def test_no_role_sees_or_reveals_the_secret_but_the_runs_own_agent_reads_it_back(agent, policy):
    run_id = "run-keys-roles"
    _, secret = agent_run(agent, run_id, version=3)
    compliance, oncall = person("colin.compliance", "compliance"), person("olivia.oncall", "oncall")
    admin_user = person("ada.admin", is_staff=True, is_superuser=True)
    for user in (compliance, admin_user, oncall):
        session = Client()
        session.force_login(user)
        bodies = {**readable(Api(session), run_id), **console_pages(session, run_id)}
        assert not [p for p, b in bodies.items() if secret in b], f"{user.username} sees the run's key secret"
        r = session.post(f"/runs/{run_id}/events/1/reveal/", {"path": "key_secret"})
        assert secret not in r.content.decode()
        if user is not oncall:  # on call may not reveal at all
            assert r.status_code == 400 and "never revealed" in r.content.decode()
    # Compliance still sees the account itself (view_sensitive), and its export is not "masked".
    session = Client()
    session.force_login(compliance)
    assert ACCOUNT in session.get(f"/api/runs/{run_id}/events").content.decode()
    # Its unmasked export withholds only the secret, and imports again as unchanged where the run is.
    from runs.importer import log_import

    exported = b"".join(session.get(f"/runs/{run_id}/export.jsonl").streaming_content)
    assert ACCOUNT.encode() in exported and b'"key_secret": "[masked]"' in exported.replace(b'":"', b'": "')
    assert log_import(f"{run_id}.jsonl", exported).outcome == "unchanged"
    # The run's agent (append scope) reads its run_started back with the secret: that is how it
    # resumes with the same keys. It is not a reveal: nothing is recorded for it.
    first = agent.get(f"/api/runs/{run_id}/events").json()["events"][0]
    assert first["payload"]["key_secret"] == secret


def test_a_decide_token_sees_the_secret_masked_too(agent, policy):
    run_id = "run-keys-decide"
    _, secret = agent_run(agent, run_id, version=3)
    _, token = token_create(name="ops script", scopes=["read", "decide"])
    bodies = readable(Api(Client(), token), run_id)
    assert not [p for p, b in bodies.items() if secret in b]
    assert json.loads(bodies[f"/api/runs/{run_id}/events"])["events"][0]["payload"]["key_secret"] == "[masked]"
