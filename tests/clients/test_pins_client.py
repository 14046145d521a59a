"""Pins the agent client's load-bearing line (docs/agents.md, "What the client does"): a key the log already completed returns the
stored result, and the tool is not called again.

Both transports: the store in-process, and Reckon's HTTP API served by gunicorn on 127.0.0.1.
"""

from __future__ import annotations

import pytest
from reckon_client import HttpTransport, ToolCall, open_run

from access.tokens import token_create
from runs.client import StoreTransport
from reckon_client.identity import call_key
from runs.leases import lease_acquire, lease_release
from runs.store import NewEvent, events_append, events_read
from runs.synthetic import calls_started
from tests.clients.helpers import CountingTool

pytestmark = pytest.mark.django_db(transaction=True)

ARGS = {"tenant": "acme", "account": "4020", "amount": "840.00", "currency": "GBP", "period": "2026-Q3"}


@pytest.fixture(params=["store", "http"])
def transport(request):
    if request.param == "store":
        return StoreTransport
    srv = request.getfixturevalue("server")
    _, secret = token_create(name="pins agent", scopes=["append", "read"])
    return lambda: HttpTransport(f"{srv.url}/api", secret)


def _starts(run_id: str) -> list[str]:
    return [e.payload["call_id"] for e in events_read(run_id=run_id) if e.type == "tool_call_started"]


def test_it_returns_the_stored_result_of_a_key_the_resumed_log_already_completed_without_calling_the_tool(transport):
    run_id = "run-pin-client-1"
    first_tool = CountingTool({"operation": "OP-1", "status": "posted"})
    first = open_run(run_id, transport=transport(), holder="agent-a", renew=False)
    done = first.invoke(ToolCall("c1", "post_correction", ARGS), first_tool)
    first.close(release=True)
    assert first_tool.calls == 1 and done.content == {"operation": "OP-1", "status": "posted"}

    # The process is gone; a fresh one resumes the run and the model proposes the same action
    # under a fresh call id. The tool would answer differently if it ran: it must not run.
    second_tool = CountingTool({"operation": "OP-2", "status": "posted again"})
    resumed = open_run(run_id, transport=transport(), holder="agent-b", renew=False)
    try:
        again = resumed.invoke(ToolCall("c7", "post_correction", dict(reversed(list(ARGS.items())))), second_tool)
    finally:
        resumed.close(release=True)

    assert second_tool.calls == 0, "the client called the tool for a key the log had already completed"
    assert again.content == {"operation": "OP-1", "status": "posted"}
    assert again.replayed and not again.is_error and again.call_id == "c7"
    assert _starts(run_id) == ["c1"], "no second start may be written for a completed key"


def test_it_returns_the_result_recovery_recorded_for_a_key_without_calling_the_tool(transport):
    """The completion need not be the client's own: one appended by reconciliation after a crash
    (the effect was found on the receiver) is the stored result too."""
    run_id = "run-pin-client-2"
    secret = "0f" * 16  # the run's key secret: the crashed agent computed its key with it, as the client does
    key = call_key(run_id, "post_correction", ARGS, secret)
    recovered = {"id": "OP-9", "amount": "840.00", "source": "ledger lookup"}
    lease = calls_started(run_id, [("c1", "post_correction", ARGS)], holder="agent-a", secret=secret)
    lease_release(run_id=run_id, epoch=lease.epoch)
    lease = lease_acquire(run_id=run_id, holder="reckon-recovery:test")
    events_append(
        run_id=run_id,
        epoch=lease.epoch,
        expected_seq=2,
        events=[
            NewEvent(
                "tool_call_completed",
                {"call_id": "c1", "name": "post_correction", "content": recovered, "is_error": False, "idempotency_key": key, "source": "reconciliation", "start_seq": 2},
            )
        ],
    )
    lease_release(run_id=run_id, epoch=lease.epoch)

    tool = CountingTool({"id": "OP-10"})
    resumed = open_run(run_id, transport=transport(), holder="agent-b", renew=False)
    try:
        result = resumed.invoke(ToolCall("c2", "post_correction", ARGS), tool)
    finally:
        resumed.close(release=True)
    assert tool.calls == 0
    assert result.content == recovered and result.replayed
    assert _starts(run_id) == ["c1"]
