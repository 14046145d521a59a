"""The client's async API and its ``@tool`` decorator against Reckon over HTTP (gunicorn on
127.0.0.1): a recorded call runs once, a resumed run answers it from the log, a proven failure is
recorded as one, and an exception that proves nothing leaves the call uncertain."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import pytest
from reckon_client import CallUncertain, ToolCall, ToolFailed, aio, open_run, tool

from access.tokens import token_create
from runs.selectors import run_state
from runs.store import events_read

pytestmark = pytest.mark.django_db(transaction=True)


def run_agent(coro_fn):
    """``asyncio.run`` of the agent in a thread of its own, as an agent's process has its own loop:
    the test process may hold a running loop already (Playwright's, after a browser test)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro_fn()).result(timeout=120)


@pytest.fixture
def token():
    return token_create(name="async agent", scopes=["append", "read"])[1]


def test_an_async_tool_runs_once_and_a_resumed_run_answers_it_from_the_log(server, token):
    effects: list[str] = []

    @tool
    async def send_notice(regulator: str, *, idempotency_key: str) -> dict:
        await asyncio.sleep(0)
        effects.append(idempotency_key)
        return {"sent": regulator}

    async def agent() -> dict:
        async with aio.open_run("run-async-notice", url=server.url, token=token, ttl=5):
            return await send_notice(regulator="FCA")

    assert run_agent(agent) == {"sent": "FCA"}
    assert run_agent(agent) == {"sent": "FCA"}  # a second process, resuming: from the log
    assert len(effects) == 1
    starts = [e.payload for e in events_read(run_id="run-async-notice") if e.type == "tool_call_started"]
    assert [s["idempotency_key"] for s in starts] == effects
    assert run_state(run_id="run-async-notice").resumptions == 1


def test_the_decorator_records_a_proven_failure_and_leaves_an_unknown_outcome_uncertain(server, token):
    @tool
    def refund(order: str) -> dict:
        if order == "closed":
            raise ToolFailed("order closed: nothing refunded")
        raise TimeoutError("no answer within 5 s")

    with open_run("run-decorated", url=server.url, token=token, ttl=5) as run:
        with pytest.raises(ToolFailed, match="order closed"):
            refund(order="closed")
        with pytest.raises(CallUncertain) as caught:
            refund(order="A-1")
        assert caught.value.idempotency_key == run.key_for(ToolCall("x", "refund", {"order": "A-1"}))
    with pytest.raises(RuntimeError, match="outside a run"):
        refund(order="A-2")  # the run has been left: nothing to record into, so nothing runs
    done = [e.payload for e in events_read(run_id="run-decorated") if e.type == "tool_call_completed"]
    assert [(d["name"], d["is_error"], d["idempotency_key"]) for d in done] == [("refund", True, None)]
    assert [c.idempotency_key for c in run_state(run_id="run-decorated").uncertain_calls] == [caught.value.idempotency_key]
