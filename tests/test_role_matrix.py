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
from tests.console.helpers import _user, client_for
from tests.console.matrix import CALL, MATRIX, PUBLIC, RUN

pytestmark = pytest.mark.django_db

SESSIONS = ("anonymous", "oncall", "compliance", "manager", "outsider", "admin")
TOKENS = {  # name: (scopes, tenants)
    "append token": (["append"], []),
    "read token": (["read"], []),
    "decide token": (["decide"], []),
    "append token (acme)": (["append"], ["acme"]),
    "read token (acme)": (["read"], ["acme"]),
    "decide token (acme)": (["decide"], ["acme"]),
    "reports token": (["reports"], []),
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
    ("get", "/api/reports/{table}"): ("reports", 200),
}
BODIES = {"post": {}, "patch": {"fields": {"no_such_field": 1}}}
SESSION_SCOPES = {"oncall": {"read", "decide"}, "compliance": {"read"}, "manager": {"read", "reports"}, "outsider": set(), "admin": {"read", "decide", "append", "admin", "reports"}}


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
    targets = {"acme": {"run_id": "run-acme", "pk": seeded["call"].pk, "tool": "post_correction", "table": "volume"}}
    targets["globex"] = {"run_id": "run-globex", "pk": seeded["other_call"].pk, "tool": "post_correction", "table": "worst"}
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
            # A token is no console sign-in: a page sends it to the sign-in page, a form posted without a
            # session is answered in place, "Nothing was recorded" (console/session.py).
            signed_out = actor == "anonymous" or actor not in expected_by_role
            expected = (403 if method == "post" else 302) if signed_out else expected_by_role[actor]
            resp, written = _ask(client, method, url, data)
            if resp.status_code != expected:
                problems.append(f"{method.upper()} {url} as {actor}: {resp.status_code}, expected {expected}")
            if _check_disclosure(actor, f"{method.upper()} {url}", resp, written, problems, also_sees=frozenset(DECIDER_REVEALS.get(name, ()))):
                shown.add((actor, name))
    assert not problems, "\n".join(problems)
    assert {("compliance", "console:reveal"), ("admin", "console:run_export"), ("oncall", "console:call_reveal"), ("compliance", "console:call_reveal")} <= shown, shown


# --- issue 31 finding 3: the access record keeps no sensitive value --------------------------------------


def test_the_access_record_keeps_no_sensitive_value_from_a_reason_a_search_or_a_key_shown_to_anyone(world):
    from django.contrib.auth.models import User

    from evidence.bundles import evidence_build
    from access.tokens import principal_for_user
    from runs.leases import lease_acquire, lease_release
    from runs.store import NewEvent, events_append
    from tests.access.seed import SECRET

    seeded, clients = world
    # A memory entry whose key holds the account: a read of the state lists its path.
    lease = lease_acquire(run_id="run-acme", holder="agent")
    memory = NewEvent("memory_written", {"key": f"acme/2026-Q3/{SECRET}", "value": {"account": SECRET}})
    events_append(run_id="run-acme", epoch=lease.epoch, expected_seq=lease.last_seq, events=[memory])
    lease_release(run_id="run-acme", epoch=lease.epoch)
    compliance = clients["compliance"]
    reveal = compliance.post(f"/runs/run-acme/events/{seeded['seq']}/reveal/", {"path": "arguments.account", "reason": f"checking acct {SECRET} for ticket T-9"})
    assert reveal.status_code == 200 and SECRET in reveal.content.decode(), reveal.status_code
    part = SECRET[:-2]  # a part of the value, which no masking by value finds
    found = compliance.get("/search/", {"q": part})
    assert found.status_code == 200 and SECRET in found.content.decode()
    assert compliance.get("/api/runs/run-acme/state").status_code == 200
    records = list(AccessRecord.objects.filter(run_id="run-acme"))
    assert {r.front_end for r in records} == {"console", "api"} and len(records) >= 3, [(r.front_end, r.why) for r in records]
    kept = json.dumps([[r.why, r.fields, r.call_id, r.idempotency_key] for r in records])
    assert part not in kept, kept
    assert "ticket T-9" in kept and "state.memory." in kept  # the rest of the reason and of the path are kept
    # Nobody reads the value from the record: the run screen, the access screen, the masked bundle.
    for actor in ("manager", "oncall", "compliance"):
        body = clients[actor].get("/runs/run-acme/").content.decode()
        assert "ticket T-9" in body and part not in body, actor
    assert part not in compliance.get("/access/", {"run": "run-acme"}).content.decode()
    files, result = evidence_build(run_id="run-acme", masked=True, who=principal_for_user(User.objects.get(username="mandy")))
    assert result.startswith("verified"), result
    assert [name for name, data in files.items() if part.encode() in data] == []
    assert b"ticket T-9" in files["access.jsonl"] and b"ticket T-9" in files["report.html"]


def test_a_record_written_before_records_were_masked_shows_no_value_on_the_run_screen(world):
    from access.chain import access_chain_append
    from tests.access.seed import SECRET

    _, clients = world
    old = AccessRecord.objects.create(actor_kind="user", actor_name="colin", front_end="console", run_id="run-acme", seq=3, fields=[f"memory.{SECRET}"], why=f"checking acct {SECRET}")
    access_chain_append([old])
    for actor in ("manager", "oncall"):
        body = clients[actor].get("/runs/run-acme/").content.decode()
        assert "checking acct [masked]" in body and SECRET not in body, actor


# --- issue 31 finding 6: keys of runs without a key secret give no masked value away ----------------------


def test_a_legacy_key_is_masked_for_whoever_may_not_see_the_value_and_recorded_when_shown_whole(world):
    from django.contrib.auth.models import User

    from evidence.bundles import evidence_build
    from access.tokens import principal_for_user
    from recovery.detection import uncertain_calls_detect
    from recovery.models import UncertainCall
    from reckon_client.identity import call_key
    from runs.leases import lease_acquire, lease_release
    from runs.store import NewEvent, events_append

    seeded, clients = world
    run_id, args = "run-legacy", {"tenant": "acme", "account": "5521", "amount": "840.00", "currency": "GBP", "period": "2026-Q3"}
    lease = lease_acquire(run_id=run_id, holder="agent")
    # Schema version 1, as the demo's imported logs: no key secret, the key recomputed by the documented formula.
    events = [NewEvent("run_started", {"run_id": run_id}, v=1), NewEvent("tool_call_started", {"call_id": "c1", "name": "post_correction", "arguments": args, "tenant": "acme"}, v=1)]
    events_append(run_id=run_id, epoch=lease.epoch, expected_seq=0, events=events)
    lease_release(run_id=run_id, epoch=lease.epoch)
    uncertain_calls_detect(run_id=run_id)
    call = UncertainCall.objects.get(run_id=run_id)
    key = call.idempotency_key
    assert key == call_key(run_id, "post_correction", args)  # anyone with the key could test guesses of the account
    prefix = key[:6]  # the shortest part of it any screen showed (the overview showed 12 digits)

    pages = [f"/calls/{call.pk}/", f"/runs/{run_id}/", "/overview/", "/queue/", f"/search/?q={run_id}", f"/runs/{run_id}/export.jsonl", f"/runs/{run_id}/export.csv"]
    api = [f"/api/uncertain-calls/{call.pk}", "/api/uncertain-calls?state=all", f"/api/runs/{run_id}/events", f"/api/runs/{run_id}/state"]
    leaks = []
    for actor, paths in (("manager", pages + api), ("oncall", pages + api), ("read token", api), ("read token (acme)", api)):
        for path in paths:
            r = clients[actor].get(path)
            body = b"".join(r.streaming_content) if r.streaming else r.content
            if r.status_code == 200 and prefix.encode() in body:
                leaks.append(f"{path} as {actor}")
    assert leaks == []
    # Nor does a search for the first digits of a guess's key find the call (it would confirm the guess).
    for actor in ("manager", "oncall"):
        assert f"/calls/{call.pk}/" not in clients[actor].get("/search/", {"q": prefix}).content.decode(), actor
    assert f"/calls/{call.pk}/" in clients["compliance"].get("/search/", {"q": prefix}).content.decode()
    files, result = evidence_build(run_id=run_id, masked=True, who=principal_for_user(User.objects.get(username="mandy")))
    assert result.startswith("verified"), result
    assert [name for name, data in files.items() if prefix.encode() in data] == []

    # Whoever may see the account sees the key whole, and the access record says so (without the key).
    before = AccessRecord.objects.count()
    detail = clients["compliance"].get(f"/api/uncertain-calls/{call.pk}").json()
    assert detail["call"]["idempotency_key"] == key
    (rec,) = AccessRecord.objects.filter(run_id=run_id, id__gt=0).order_by("-id")[:1]
    assert AccessRecord.objects.count() == before + 1 and "call.idempotency_key" in rec.fields, rec.fields
    assert prefix not in json.dumps([rec.why, rec.fields, rec.idempotency_key])
    # A run that keys its calls with a secret gives nothing away: its key is shown to a manager.
    acme = seeded["call"]
    assert acme.idempotency_key in clients["manager"].get(f"/calls/{acme.pk}/").content.decode()


# --- issue 31: who writes what, whose lease it is, whose run it is, one tenant rule -------------

FORGED = {  # a person's facts and Reckon's own, as an agent would forge them
    "approval_decided": {"call_id": "call_1", "approved": False, "decision": "not_happened", "by": "admin", "reason": "forged"},
    "tool_call_resolved": {"idempotency_key": "k", "disposition": "not_happened", "by": "admin"},
    "operator_note": {"by": "compliance", "text": "forged", "action": "note"},
    "run_paused": {"reason": "forged"},
    "tool_call_uncertain": {"call_id": "call_1", "idempotency_key": "k", "start_seq": 4, "reason": "forged"},
    "reconciliation_attempted": {"idempotency_key": "k", "attempt": 1, "outcome": "absent"},
}


def _post(client: Client, url: str, body: dict):
    return client.post(url, json.dumps(body), content_type="application/json")


def _lease(client: Client, run_id: str, holder: str = "agent:1", tenant: str | None = "acme"):
    return _post(client, f"/api/runs/{run_id}/lease", {"holder": holder, **({"tenant": tenant} if tenant else {})})


@pytest.mark.parametrize("actor", ["append token", "append token (acme)", "agent", "admin"])
def test_an_agent_cannot_write_a_persons_decision_or_reckons_facts(world, actor):
    """Finding 1: each writer with the append scope, tenant-limited or not, on its own new run and on
    the demo's escalated conflict (run-acme): 403 naming the type, nothing written, the call unchanged."""
    from runs.models import Run

    seeded, clients = world
    client = clients[actor]
    call = seeded["call"]
    for run_id in ("run-own-" + re.sub(r"[^A-Za-z0-9]+", "-", actor).strip("-"), "run-acme"):
        lease = _lease(client, run_id)
        assert lease.status_code == 200, (run_id, lease.content)
        epoch, last = lease.json()["epoch"], lease.json()["last_seq"]
        forged = [*FORGED.items(), ("tool_call_completed", {"call_id": "call_1", "name": "post_correction", "content": "ok", "source": "operator"})]
        for type_, payload in forged:
            r = _post(client, f"/api/runs/{run_id}/events", {"epoch": epoch, "expected_seq": last, "events": [{"type": type_, "payload": payload}]})
            assert r.status_code == 403, (actor, run_id, type_, r.status_code, r.content)
            assert r.json()["code"] == "forbidden" and type_ in r.json()["detail"] and r.json()["type"] == type_, r.json()
        assert Run.objects.get(run_id=run_id).last_seq == last
        _post(client, f"/api/runs/{run_id}/lease/release", {"epoch": epoch})
    call.refresh_from_db()
    assert call.state == "escalated" and call.disposition != "not_happened"


@pytest.mark.parametrize("actor", ["read token", "decide token", "decide token (acme)", "oncall"])
def test_callers_without_the_append_scope_cannot_append_a_decision_either(world, actor):
    _, clients = world
    r = _post(clients[actor], "/api/runs/run-acme/events", {"epoch": 1, "expected_seq": 4, "events": [{"type": "approval_decided", "payload": FORGED["approval_decided"]}]})
    assert r.status_code == 403, r.content


def test_the_in_process_client_refuses_a_persons_decision(world):
    from reckon_client import open_run
    from runs.client import StoreTransport
    from runs.errors import WriterRefused

    run = open_run("run-client-forge", transport=StoreTransport(), ttl=30, tenant="acme")
    with pytest.raises(WriterRefused, match="approval_decided"):
        run.append("approval_decided", **FORGED["approval_decided"])
    assert run.state.last_seq == 1  # its run_started only
    run.close()


def test_a_lease_belongs_to_its_holder(world):
    """Finding 2: a second token learns who holds the lease and until when, never the epoch, and
    cannot append, renew or release under the holder's epoch even when it knows it."""
    from runs.models import Run

    _, clients = world
    owner, thief = clients["append token"], clients["append token (acme)"]
    mine = _lease(owner, "run-leased")
    assert mine.status_code == 200
    epoch = mine.json()["epoch"]
    assert _post(owner, "/api/runs/run-leased/events", {"epoch": epoch, "expected_seq": 0, "events": [{"type": "run_started", "payload": {"run_id": "run-leased", "tenant": "acme"}}]}).status_code == 201
    held = _lease(thief, "run-leased", holder="thief:1")
    body = held.json()
    assert held.status_code == 409 and body["code"] == "lease_held", body
    assert body["holder"] == "agent:1" and body["held_by"] == "token 'append token'" and body["expires_at"]
    assert "current_epoch" not in body and "epoch" not in body["detail"], body
    for guess in (epoch, epoch + 1, 0):
        appended = _post(thief, "/api/runs/run-leased/events", {"epoch": guess, "expected_seq": 1, "events": [{"type": "user_message", "payload": {"content": "stolen"}}]})
        assert appended.status_code == 409 and "current_epoch" not in appended.json(), appended.content
        renewed = _post(thief, "/api/runs/run-leased/lease/renew", {"epoch": guess, "ttl_seconds": 86400})
        assert renewed.status_code == 409 and "current_epoch" not in renewed.json(), renewed.content
        released = _post(thief, "/api/runs/run-leased/lease/release", {"epoch": guess})
        assert released.status_code == 409 and "current_epoch" not in released.json(), released.content
    assert appended.json()["code"] == "stale_epoch"
    assert Run.objects.get(run_id="run-leased").last_seq == 1
    # Nothing else gives the epoch away to a non-holder; its holder reads it, and keeps writing.
    assert clients["read token"].get("/api/runs/run-leased").json()["lease_epoch"] is None
    assert owner.get("/api/runs/run-leased").status_code == 403  # no read scope: the answer above is the reader's
    assert _post(owner, "/api/runs/run-leased/lease/renew", {"epoch": epoch}).status_code == 200
    assert _post(owner, "/api/runs/run-leased/events", {"epoch": epoch, "expected_seq": 1, "events": [{"type": "user_message", "payload": {"content": "mine"}}]}).status_code == 201
    assert _post(owner, "/api/runs/run-leased/lease/release", {"epoch": epoch}).status_code == 204


def test_a_lease_does_not_make_someone_elses_run_yours_to_read_unrecorded(world):
    """Finding 5: a token with append and read that takes the lease of a run it did not begin reads
    it recorded, like anyone; an imported run's lease is refused."""
    from pathlib import Path

    from runs.importer import paths_import

    _, clients = world
    _, secret = token_create(name="curious agent", scopes=["append", "read"])
    curious = Client(HTTP_AUTHORIZATION=f"Bearer {secret}")
    lease = _lease(curious, "run-globex", tenant=None)
    assert lease.status_code == 200, lease.content
    assert _post(curious, "/api/runs/run-globex/lease/release", {"epoch": lease.json()["epoch"]}).status_code == 204
    before = AccessRecord.objects.count()
    page = curious.get("/api/runs/run-globex/events")
    assert page.status_code == 200 and runs_shown(page.content) == {"run-globex"}
    assert AccessRecord.objects.count() == before + 1
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "events" / "v2" / "run-c772-conflict.jsonl"
    assert paths_import([str(fixture)])[0].outcome == "imported"
    refused = _lease(curious, "run-c772-conflict", tenant=None)
    assert refused.status_code == 409 and refused.json()["code"] == "run_imported", refused.content


def test_the_run_screen_marks_imported_events(world):
    from pathlib import Path

    from runs.importer import paths_import

    _, clients = world
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "events" / "v2" / "run-c772-conflict.jsonl"
    assert paths_import([str(fixture)])[0].outcome == "imported"
    imported = clients["admin"].get(reverse("console:run", args=["run-c772-conflict"]))
    live = clients["admin"].get(reverse("console:run", args=["run-acme"]))
    assert imported.status_code == live.status_code == 200
    assert b">imported</span>" in imported.content and b">imported</span>" not in live.content


def test_a_tenant_limited_token_cannot_list_or_decide_a_call_of_a_run_outside_its_tenants(world):
    """Finding 8: a run that touched acme and globex is invisible to a token of acme alone, and so
    is its acme call: not listed, not shown, not decidable."""
    from demo.management.commands.demo import scenario_run_create
    from recovery.models import UncertainCall
    from recovery.reconcile import reconcile_pass
    from runs.leases import lease_acquire, lease_release
    from runs.store import NewEvent, events_append
    from tests.access.seed import ARGS

    _, clients = world
    scenario_run_create(run_id="run-both", tool="post_correction", arguments={**ARGS, "reference": "C-921"}, started_minutes_ago=50, ledger={**ARGS, "amount": "1.00"})
    lease = lease_acquire(run_id="run-both", holder="agent-both")
    events_append(run_id="run-both", epoch=lease.epoch, expected_seq=lease.last_seq, events=[
        NewEvent("tool_call_started", {"call_id": "call_2", "name": "lookup", "arguments": {"tenant": "globex"}, "tenant": "globex"}),
        NewEvent("tool_call_completed", {"call_id": "call_2", "name": "lookup", "content": "ok"}),
    ])
    lease_release(run_id="run-both", epoch=lease.epoch)
    reconcile_pass(due_only=False)
    call = UncertainCall.objects.get(run_id="run-both")
    assert call.tenant == "acme" and call.state == "escalated"
    from runs.tenants import run_tenants

    assert run_tenants(run_id="run-both") == {"acme", "globex"}
    for actor in ("read token (acme)", "decide token (acme)", "agent"):
        client = clients[actor]
        if "read" in TOKENS[actor][0]:
            assert client.get("/api/runs/run-both").status_code == 404
            listed = client.get("/api/uncertain-calls", {"state": "all", "limit": 500}).json()["calls"]
            assert call.pk not in {c["id"] for c in listed}, actor
            assert client.get(f"/api/uncertain-calls/{call.pk}").status_code == 404
        decided = _post(client, f"/api/uncertain-calls/{call.pk}/decisions", {"decision": "not_happened", "reason": "acme only", "seen_version": call.version})
        assert decided.status_code in (403, 404), (actor, decided.status_code)
        assert _post(client, f"/api/uncertain-calls/{call.pk}/claim", {"seen_version": call.version}).status_code in (403, 404)
    assert _post(clients["decide token (acme)"], f"/api/uncertain-calls/{call.pk}/decisions", {"decision": "not_happened", "reason": "acme only", "seen_version": call.version}).status_code == 404
    call.refresh_from_db()
    assert call.state == "escalated"
    # Unlimited callers still see and decide it.
    assert call.pk in {c["id"] for c in clients["read token"].get("/api/uncertain-calls", {"state": "all", "limit": 500}).json()["calls"]}
