"""The agent client's keys under schema version 3: computed with the run's key secret, which the
client is given when it starts the run and reads back when it resumes it, so the same call has the
same key before and after a resume. Both transports: the store in-process, and Reckon's HTTP API
served by gunicorn on 127.0.0.1."""

from __future__ import annotations

import pytest
from reckon_client import HttpTransport, ToolCall, open_run

from access.tokens import token_create
from runs.client import StoreTransport
from reckon_client.identity import call_key, signature
from runs.selectors import run_key_secret
from runs.store import events_read
from tests.clients.helpers import CountingTool

pytestmark = pytest.mark.django_db(transaction=True)

ARGS = {"tenant": "acme", "account": "4821", "amount": "840.00", "currency": "GBP", "period": "2026-Q3"}


@pytest.fixture(params=["store", "http"])
def transport(request):
    if request.param == "store":
        return StoreTransport
    srv = request.getfixturevalue("server")
    _, secret = token_create(name="keys agent", scopes=["append", "read"])
    return lambda: HttpTransport(f"{srv.url}/api", secret)


def _recorded_keys(run_id: str) -> list[str]:
    return [e.payload["idempotency_key"] for e in events_read(run_id=run_id) if e.type == "tool_call_started"]


def test_the_clients_keys_are_the_same_before_and_after_a_resume(transport):
    run_id = "run-client-keys"
    first = open_run(run_id, transport=transport(), holder="agent-a", renew=False)
    secret = run_key_secret(run_id=run_id)
    assert secret and first.state.key_secret == secret, "the client is given the secret the store chose"
    call, other = ToolCall("c1", "post_correction", ARGS), ToolCall("c2", "post_correction", {**ARGS, "amount": "1.00"})
    before = (first.key_for(call), first.key_for(other))
    assert before[0] == call_key(run_id, "post_correction", ARGS, secret) != call_key(run_id, "post_correction", ARGS)
    first.invoke(call, CountingTool({"id": "OP-1"}))
    first.close(release=True)

    resumed = open_run(run_id, transport=transport(), holder="agent-b", renew=False)
    try:
        assert resumed.state.key_secret == secret
        assert (resumed.key_for(call), resumed.key_for(other)) == before
        tool = CountingTool({"id": "OP-2"})
        again = resumed.invoke(ToolCall("c9", "post_correction", dict(reversed(list(ARGS.items())))), tool)
    finally:
        resumed.close(release=True)
    assert tool.calls == 0 and again.replayed and again.content == {"id": "OP-1"}
    assert _recorded_keys(run_id) == [before[0]]


def test_an_operation_id_gives_an_intentional_repeat_its_own_key_and_its_own_effect(transport):
    run_id = "run-client-ops"
    run = open_run(run_id, transport=transport(), holder="agent-a", renew=False)
    tool = CountingTool({"status": "sent"})
    try:
        run.invoke(ToolCall("c1", "send_reminder", {"to": "ops"}, operation_id="reminder-1"), tool)
        run.invoke(ToolCall("c2", "send_reminder", {"to": "ops"}, operation_id="reminder-2"), tool)
        replay = run.invoke(ToolCall("c3", "send_reminder", {"to": "ops"}, operation_id="reminder-1"), tool)
    finally:
        run.close(release=True)
    assert tool.calls == 2 and replay.replayed
    secret = run_key_secret(run_id=run_id)
    sig = signature("send_reminder", {"to": "ops"})
    from reckon_client.identity import idempotency_key

    assert _recorded_keys(run_id) == [idempotency_key(run_id, sig, secret, "reminder-1"), idempotency_key(run_id, sig, secret, "reminder-2")]
    starts = [e.payload for e in events_read(run_id=run_id) if e.type == "tool_call_started"]
    assert [p["operation_id"] for p in starts] == ["reminder-1", "reminder-2"]
