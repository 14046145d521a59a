"""Freshness on resume: a completed read older than its tool's ``fresh_for`` is not returned from the
log but read again, as a new recorded operation with its own identity; ``run_resumed`` lists the
stale observations. The same on both transports: in-process (runs.client) and over HTTP
(reckon_client against gunicorn on 127.0.0.1)."""

from __future__ import annotations

import time

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from access.tokens import token_create
from recovery.policies import PolicyError, policies_parse
from recovery.policy_changes import policies_load
from reckon_client import HttpTransport, ToolCall, open_run
from runs.client import StoreTransport
from reckon_client.identity import idempotency_key, refresh_operation_id, signature
from runs.store import events_read

pytestmark = pytest.mark.django_db(transaction=True)

POLICIES = """
[tools.read_ledger]
risk_class = "read_only"
strategy   = "reconcile_then_retry"
fresh_for  = "1s"

[tools.post_correction]
risk_class = "irreversible"
strategy   = "escalate"
"""
ARGS = {"tenant": "acme", "account": "4020"}


@pytest.fixture(params=["store", "http"])
def transport(request):
    if request.param == "store":
        return StoreTransport
    srv = request.getfixturevalue("server")
    _, secret = token_create(name="freshness agent", scopes=["append", "read"])
    return lambda: HttpTransport(f"{srv.url}/api", secret)


class Reads:
    def __init__(self):
        self.calls = []

    def __call__(self, arguments, *, idempotency_key):
        self.calls.append(idempotency_key)
        return {"balance": 7000 + len(self.calls), "read": len(self.calls)}


def _events(run_id, type_):
    return [e for e in events_read(run_id=run_id) if e.type == type_]


def test_a_stale_read_is_read_again_as_its_own_operation_and_a_fresh_one_is_not(transport):
    policies_load(text=POLICIES, by="tests")
    run_id = f"run-fresh-{transport.__class__.__name__.lower()}-{int(time.time() * 1000)}"
    read, post = Reads(), Reads()
    run = open_run(run_id, transport=transport(), ttl=5, renew=False)
    first = run.invoke(ToolCall("c1", "read_ledger", ARGS), read)
    run.invoke(ToolCall("c2", "post_correction", ARGS), post)
    run.close()
    k0 = _events(run_id, "tool_call_completed")[0]
    time.sleep(1.2)  # older than fresh_for now

    run = open_run(run_id, transport=transport(), ttl=5, renew=False)
    resumed = _events(run_id, "run_resumed")[-1].payload
    assert [(o["idempotency_key"], o["name"], o["seq"], o["fresh_for_s"]) for o in resumed["stale_observations"]] == [
        (k0.payload["idempotency_key"], "read_ledger", k0.seq, 1)
    ]
    again = run.invoke(ToolCall("c3", "read_ledger", ARGS), read)
    posted = run.invoke(ToolCall("c4", "post_correction", ARGS), post)
    run.close()
    assert not again.replayed and again.content == {"balance": 7002, "read": 2} != first.content
    assert posted.replayed and len(post.calls) == 1  # a tool without fresh_for is never read again
    start = _events(run_id, "tool_call_started")[-1].payload
    op = refresh_operation_id(None, k0.seq)
    secret = events_read(run_id=run_id)[0].payload["key_secret"]
    assert start["operation_id"] == op and start["refreshes"] == {"idempotency_key": k0.payload["idempotency_key"], "seq": k0.seq}
    assert start["idempotency_key"] == read.calls[1] == idempotency_key(run_id, signature("read_ledger", ARGS), secret, op) != read.calls[0]

    # Resumed at once: the new read is fresh and comes from the log; the first is still stale.
    run = open_run(run_id, transport=transport(), ttl=5, renew=False)
    third = run.invoke(ToolCall("c5", "read_ledger", ARGS), read)
    run.close()
    assert third.replayed and third.content == again.content and len(read.calls) == 2
    assert [o["seq"] for o in _events(run_id, "run_resumed")[-1].payload["stale_observations"]] == [k0.seq]


def test_fresh_for_is_refused_for_a_tool_that_changes_the_world(tmp_path):
    with pytest.raises(PolicyError, match="tool 'post_correction': fresh_for is only for read_only and idempotent tools, not irreversible"):
        policies_parse('[tools.post_correction]\nrisk_class = "irreversible"\nstrategy = "escalate"\nfresh_for = "5m"\n')
    path = tmp_path / "policies.toml"
    path.write_text('[tools.issue_refund]\nrisk_class = "reversible"\nstrategy = "escalate"\nfresh_for = "5m"\n')
    with pytest.raises(CommandError, match=rf"^{path}: tool 'issue_refund': fresh_for is only for .*nothing was loaded$"):
        call_command("load_policies", str(path))
    assert policies_parse('[tools.get_rate]\nrisk_class = "idempotent"\nstrategy = "escalate"\nfresh_for = "15m"\n')[0].fresh_for_s == 900
