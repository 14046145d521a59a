"""Identical calls in flight at once (docs/agents.md, "Identical calls at once"), through the client against
Reckon over HTTP (gunicorn on 127.0.0.1): asyncio tasks on ``AsyncRun.invoke`` and threads on
``Run.invoke``, as the MCP proxy and the framework adapters run a turn's calls.

With ``repeat`` each ask is its own operation: both run, under two keys, and a later session
computes the same two keys (answered from the log, or still uncertain). Without it the arguments
are the action: the second call waits for the first and gets its answer, one effect.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from reckon_client import CallUncertain, ToolCall, aio, open_run

from access.tokens import token_create
from runs.selectors import run_state
from runs.store import events_read

pytestmark = pytest.mark.django_db(transaction=True)

POST = ("post_correction", {"account": "C-771", "amount": 840})


@pytest.fixture
def token():
    return token_create(name="concurrent agent", scopes=["append", "read"])[1]


def in_own_loop(coro_fn):
    """The agent's coroutine on an event loop of its own thread, as an agent process has (the test
    process may hold a running loop already)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro_fn()).result(timeout=120)


def _starts(run_id: str) -> list[dict]:
    return [e.payload for e in events_read(run_id=run_id) if e.type == "tool_call_started"]


class TogetherTool:
    """An async tool that counts its effects and returns only once ``together`` calls are inside it
    at the same time (so the test fails, rather than passes, if one call kept another out); with
    ``fail``, it then raises an error that proves nothing (the call is uncertain)."""

    def __init__(self, together: int, fail: bool = False):
        self.together, self.fail = together, fail
        self.keys: list[str] = []
        self.all_in: asyncio.Event | None = None

    async def __call__(self, arguments, *, idempotency_key):
        self.all_in = self.all_in or asyncio.Event()
        self.keys.append(idempotency_key)
        if len(self.keys) >= self.together:
            self.all_in.set()
        await asyncio.wait_for(self.all_in.wait(), 10)
        if self.fail:
            raise TimeoutError("no answer from the ledger")
        return {"posted": idempotency_key}


async def _at_once(run, tool, repeat, n=2) -> list:
    return await asyncio.gather(*(run.invoke(ToolCall.new(*POST), tool, repeat=repeat) for _ in range(n)), return_exceptions=True)


@pytest.mark.parametrize("repeat", ["new", "same"])
def test_identical_calls_at_once_with_repeat_are_two_operations_a_later_session_finds_again(server, token, repeat):
    run_id = f"run-at-once-{repeat}"
    tool = TogetherTool(2)

    async def first():
        async with aio.open_run(run_id, url=server.url, token=token, ttl=5) as run:
            return await _at_once(run, tool, repeat)

    results = in_own_loop(first)
    assert len(set(tool.keys)) == 2 and sorted(r.idempotency_key for r in results) == sorted(tool.keys)
    assert not any(r.replayed for r in results)
    starts = _starts(run_id)
    assert sorted(s["operation_id"] == s["idempotency_key"] for s in starts) == [False, True]  # repeat@1 and the call itself
    assert {s["operation_id"] for s in starts} >= {"repeat@1"}

    later = TogetherTool(2)

    async def second():
        async with aio.open_run(run_id, url=server.url, token=token, ttl=5) as run:
            return await _at_once(run, later, "same")  # a resumed session asking the same two calls

    again = in_own_loop(second)
    assert later.keys == [] and all(r.replayed for r in again)
    assert sorted(r.idempotency_key for r in again) == sorted(tool.keys)


def test_identical_calls_at_once_from_threads_are_two_operations(server, token):
    barrier = threading.Barrier(2, timeout=10)
    keys: list[str] = []

    def post(arguments, *, idempotency_key):
        keys.append(idempotency_key)
        barrier.wait()  # both calls inside the tool at once, or a BrokenBarrierError
        return {"posted": idempotency_key}

    with open_run("run-at-once-threads", url=server.url, token=token, ttl=5) as run:
        with ThreadPoolExecutor(2) as pool:
            results = list(pool.map(lambda _: run.invoke(ToolCall.new(*POST), post, repeat="same"), range(2)))
        assert sorted(r.idempotency_key for r in results) == sorted(keys) and len(set(keys)) == 2
        third = run.invoke(ToolCall.new(*POST), lambda a, *, idempotency_key: keys.append(idempotency_key) or {}, repeat="same")
    assert not third.replayed and len(set(keys)) == 3  # asked again after both completed: repeat@2
    assert sorted(s.get("operation_id") for s in _starts("run-at-once-threads") if s["operation_id"] != s["idempotency_key"]) == ["repeat@1", "repeat@2"]


def test_identical_calls_at_once_without_repeat_are_one_action_the_second_waits_for(server, token):
    effects: list[str] = []

    async def post(arguments, *, idempotency_key):
        effects.append(idempotency_key)
        await asyncio.sleep(0.3)  # still running when the other calls are asked
        return {"posted": idempotency_key}

    async def agent():
        async with aio.open_run("run-at-once-one", url=server.url, token=token, ttl=5) as run:
            # More calls than the default executor has threads: a call waiting for the key holds none.
            return await _at_once(run, post, None, n=12)

    results = in_own_loop(agent)
    assert len(effects) == 1 and [isinstance(r, CallUncertain) for r in results] == [False] * 12
    assert sorted(r.replayed for r in results) == [False] + [True] * 11
    assert {r.idempotency_key for r in results} == set(effects)
    assert len(_starts("run-at-once-one")) == 1


def test_identical_calls_at_once_without_repeat_from_threads_are_one_action(server, token):
    effects: list[str] = []

    def post(arguments, *, idempotency_key):
        effects.append(idempotency_key)
        threading.Event().wait(0.3)
        return {"posted": idempotency_key}

    with open_run("run-at-once-one-threads", url=server.url, token=token, ttl=5) as run:
        with ThreadPoolExecutor(4) as pool:
            results = list(pool.map(lambda _: run.invoke(ToolCall.new(*POST), post), range(4)))
    assert len(effects) == 1 and sorted(r.replayed for r in results) == [False, True, True, True]
    assert len(_starts("run-at-once-one-threads")) == 1


def test_identical_calls_left_uncertain_at_once_stay_uncertain_when_asked_again_at_once(server, token):
    run_id = "run-at-once-uncertain"
    tool = TogetherTool(2, fail=True)

    async def first():
        async with aio.open_run(run_id, url=server.url, token=token, ttl=5) as run:
            return await _at_once(run, tool, "new")

    results = in_own_loop(first)
    assert all(isinstance(r, CallUncertain) for r in results)
    assert sorted(r.idempotency_key for r in results) == sorted(tool.keys) and len(set(tool.keys)) == 2
    open_keys = {c.idempotency_key for c in run_state(run_id=run_id).uncertain_calls}
    assert open_keys == set(tool.keys)

    later = TogetherTool(2)

    async def second():
        async with aio.open_run(run_id, url=server.url, token=token, ttl=5) as run:
            return await _at_once(run, later, "new")  # "new", yet an open start is never passed over

    again = in_own_loop(second)
    assert later.keys == [] and all(isinstance(r, CallUncertain) for r in again)
    assert {r.idempotency_key for r in again} <= open_keys
    assert len(_starts(run_id)) == 2
