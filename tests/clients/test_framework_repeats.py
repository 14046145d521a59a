"""Intentional repeats through the framework adapters (docs/agents.md, "Intentional repeats"): a
LangGraph graph and a Pydantic AI agent, driven by their frameworks' own offline test models
(tests/clients/repeat_agent.py), each in a fresh environment holding only the client and its extra,
against a live Reckon (gunicorn on 127.0.0.1) and the examples' ledger in its own process, which
counts its effects by idempotency key. Each agent is a process of its own, forked from a zygote of
its environment that has imported the framework once (tests/clients/forked.py): the client and the
script are imported in the agent, and a killed agent is killed with SIGKILL.

The agent posts the same correction twice on purpose, one call after the other or both in one turn
(the frameworks run them at once). With ``repeat`` given, each ask is its own operation and reaches
the ledger; a second process on the same run asks again, and ``"same"`` answers it from the log
while ``"new"`` runs it again. Without it, the arguments are the action: one post. Killed with
SIGKILL after an effect and resumed, no call runs twice: the killed one is uncertain, with the key
the resumed process computes again.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest

from runs.selectors import run_state
from runs.store import events_read
from tests.clients.forked import Zygote
from tests.clients.helpers import HERE, LedgerProcess, _agent_env
from tests.clients.venvs import client_python

pytestmark = pytest.mark.django_db(transaction=True)

FRAMEWORKS = ["langgraph", "pydantic-ai"]

# What repeat_agent.py imports of each framework: imported once per module by a zygote of the
# framework's environment (tests/clients/forked.py), from which every agent process is forked.
FRAMEWORK_MODULES = {
    "langgraph": ["langchain_core.language_models.fake_chat_models", "langchain_core.messages", "langchain_core.tools", "langgraph.graph", "langgraph.prebuilt"],
    "pydantic-ai": ["pydantic_ai", "pydantic_ai.messages", "pydantic_ai.models.function", "pydantic_ai.toolsets"],
}


@pytest.fixture(scope="module")
def zygotes():
    """The framework's zygote, started the first time a test of this process asks for it."""
    started: dict[str, Zygote] = {}

    def zygote(framework: str) -> Zygote:
        if framework not in started:
            started[framework] = Zygote(client_python(framework), FRAMEWORK_MODULES[framework], _agent_env({}))
        return started[framework]

    yield zygote
    for z in started.values():
        z.stop()


def _agent(framework: str, repeat: str, shape: str) -> list[str]:
    return [str(HERE / "repeat_agent.py"), framework, repeat, shape]


def _run(zygote: Zygote, framework: str, repeat: str, shape: str, env: dict) -> tuple[int, dict]:
    agent = zygote.spawn(_agent(framework, repeat, shape), env)
    try:
        out, err = agent.communicate(timeout=120)
    finally:
        agent.kill()  # only if it is still running (timed out)
    assert out.strip(), f"the agent printed nothing ({agent.returncode}): {err}"
    return agent.returncode, json.loads(out.strip().splitlines()[-1])


def _starts(run_id: str) -> list[dict]:
    return [e.payload for e in events_read(run_id=run_id) if e.type == "tool_call_started"]


def _ops(run_id: str) -> list[str | None]:
    # A start with no operation id of its own records its key as the operation.
    return sorted((None if s["operation_id"] == s["idempotency_key"] else s["operation_id"] for s in _starts(run_id)), key=lambda op: op or "")


# Effects on the ledger after the first process, then after a second process on the same run.
EXPECTED = {"none": (1, 1), "same": (2, 2), "new": (2, 4)}


@pytest.mark.parametrize("shape", ["sequential", "parallel"])
@pytest.mark.parametrize("repeat", ["none", "same", "new"])
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_an_agent_that_posts_twice_on_purpose(agent_env, zygotes, framework, repeat, shape):
    run_id = f"run-twice-{framework}-{repeat}-{shape}"
    ledger = LedgerProcess()
    env = {**agent_env, "RECKON_RUN_ID": run_id, "LEDGER_URL": ledger.url}
    try:
        first_rc, first = _run(zygotes(framework), framework, repeat, shape, env)
        after_first = ledger.stats()["effects"]
        second_rc, second = _run(zygotes(framework), framework, repeat, shape, env)
        after_second = ledger.stats()["effects"]
    finally:
        ledger.stop()
    assert (first_rc, first["status"]) == (0, "done"), first
    assert second_rc == 0, second
    # Every post reached the ledger under a key of its own: no key posted twice.
    assert set(after_first.values()) == {1} and set(after_second.values()) <= {1}
    assert (len(after_first), len(after_second)) == EXPECTED[repeat]
    assert sorted(first["posted"]) == sorted(after_first) and first["answers"] == 2 and second["answers"] == 2
    starts = _starts(run_id)
    assert sorted(s["idempotency_key"] for s in starts) == sorted(after_second)  # one start per post
    state = run_state(run_id=run_id)
    assert not state.uncertain_calls and len(state.completed_calls) == len(after_second)
    assert _ops(run_id) == [None, "repeat@1", "repeat@2", "repeat@3"][: len(after_second)]


def _kill_after_effects(zygote: Zygote, cmd: list[str], env: dict, ledger: LedgerProcess, effects: int) -> None:
    agent = zygote.spawn(cmd, env)
    try:
        deadline = time.monotonic() + 90
        while len(ledger.stats()["effects"]) < effects:  # the posts are made; the last answer never comes
            if agent.poll() is not None:
                raise AssertionError(f"the agent exited ({agent.returncode}) before its posts: {agent.stdout.read()} {agent.stderr.read()}")
            assert time.monotonic() < deadline, f"the agent never made {effects} posts"
            time.sleep(0.05)
    finally:
        agent.send_signal(signal.SIGKILL)
        agent.communicate(timeout=10)  # reaps it and closes its pipes
    assert agent.returncode == -signal.SIGKILL


@pytest.mark.parametrize(
    "repeat, shape, posts, answered",
    [
        ("same", "sequential", 1, 0),  # killed inside the first post
        ("new", "sequential", 1, 0),  # the same: "new" never passes over a start the log holds open
        ("same", "sequential", 2, 1),  # killed inside the second post: the first is answered from the log
        ("new", "sequential", 2, 0),  # "new" passes the completed first call over, to the open second
        ("new", "parallel", 2, 0),  # killed with both posts of one turn made at once, neither answered
    ],
)
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_an_agent_killed_after_its_effect_and_resumed_runs_nothing_twice(agent_env, zygotes, framework, repeat, shape, posts, answered):
    run_id = f"run-twice-killed-{framework}-{repeat}-{shape}-{posts}"
    ledger = LedgerProcess(stall_after=posts - 1 if shape == "sequential" else 0)
    env = {**agent_env, "RECKON_RUN_ID": run_id, "LEDGER_URL": ledger.url}
    try:
        _kill_after_effects(zygotes(framework), _agent(framework, repeat, shape), env, ledger, effects=posts)
        killed_starts = _starts(run_id)
        rc, resumed = _run(zygotes(framework), framework, repeat, shape, env)
        effects = ledger.stats()["effects"]
    finally:
        ledger.stop()
    assert (rc, resumed["status"], resumed["epoch"]) == (3, "uncertain", 2), resumed
    assert resumed["posted"] == [] and resumed["answers"] == answered  # the resumed process posted nothing
    assert sorted(effects.values()) == [1] * posts
    starts = _starts(run_id)
    assert starts == killed_starts and sorted(s["idempotency_key"] for s in starts) == sorted(effects)
    state = run_state(run_id=run_id)
    completed = posts - 1 if shape == "sequential" else 0
    assert (len(state.completed_calls), len(state.uncertain_calls)) == (completed, posts - completed)
    # The key the resumed process was refused with is one it computed again: an open start's.
    assert resumed["idempotency_key"] in {c.idempotency_key for c in state.uncertain_calls}

# A bad option is refused where the tools are wrapped (LangGraph) or listed (Pydantic AI), naming
# the tool, before any call is recorded.
REFUSALS = {
    "langgraph": """
from langchain_core.tools import tool
from reckon_client.langgraph import recorded_tool, recorded_tools

@tool
def post_correction(account: str) -> str:
    '''Post.'''
    return account

for option in ("twice", {"post_correction": "always"}, {"post_corection": "new"}):
    try:
        recorded_tools([post_correction], repeat=option)
    except ValueError as exc:
        print(exc)
recorded_tool(post_correction, repeat="new")
print("ok")
""",
    "pydantic-ai": """
import asyncio
from pydantic_ai import Agent
from pydantic_ai.models.test import TestModel
from pydantic_ai.toolsets import FunctionToolset
from reckon_client.pydantic_ai import RecordedToolset

def post_correction(account: str) -> str:
    '''Post.'''
    return account

for option in ("twice", {"post_correction": "always"}):
    try:
        RecordedToolset(FunctionToolset([post_correction]), repeat=option)
    except ValueError as exc:
        print(exc)
agent = Agent(TestModel(), toolsets=[RecordedToolset(FunctionToolset([post_correction]), repeat={"post_corection": "new"})])
try:
    asyncio.run(agent.run("post"))
except ValueError as exc:
    print(exc)
print("ok")
""",
}


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_bad_repeat_option_is_refused_naming_the_tool(framework):
    done = subprocess.run([str(client_python(framework)), "-c", REFUSALS[framework]], cwd="/", capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "repeat must be 'new' or 'same', got 'twice'",
        "repeat must be 'new' or 'same' (tool 'post_correction'), got 'always'",
        "repeat names tools that are not there: 'post_corection'; the tools are 'post_correction'",
        "ok",
    ]
