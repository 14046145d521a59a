"""The agent client on its own: a fresh virtual environment holding only clients/python (no Django),
an agent in it writing to a live Reckon (gunicorn on 127.0.0.1) and killed with SIGKILL at
three points (mid model call, mid tool execution, after the effect). Afterwards the effect exists exactly once, or the call is uncertain, listed by
``manage.py uncertain --json``, and nothing ran twice.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from access.tokens import token_create
from recovery.detection import uncertain_calls_detect
from runs.selectors import run_state
from runs.store import events_read
from tests.api.live import PYTHON, ROOT, EffectReceiver, child_env
from tests.clients.venvs import client_python

pytestmark = pytest.mark.django_db(transaction=True)

AGENT = Path(__file__).with_name("crash_agent.py")
TTL = "1"  # lease seconds of the killed process: the fresh one waits at most this long


@pytest.fixture(scope="session")
def fresh_python() -> Path:
    return client_python("plain")


@pytest.fixture
def receiver():
    r = EffectReceiver()
    yield r
    r.stop()


@pytest.fixture
def agent_env(server, tmp_path):
    token = token_create(name="fresh agent", scopes=["append", "read"], tenants=["acme"])[1]
    # Only what an agent's machine has: no DATABASE_URL, no Django settings, no project on the path.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE", "DJANGO", "REDIS", "PYTHON"))}
    return {**env, "RECKON_URL": server.url, "RECKON_TOKEN": token}


def _agent(python, env, run_id, receiver, *, pause=None, marker=None, retry=False):
    args = [str(python), str(AGENT), "--run-id", run_id, "--ttl", TTL, "--effect-url", receiver.url] + (["--retry-uncertain"] if retry else [])
    env = {**env, **({"RECKON_FAULT_AT": pause, "RECKON_FAULT_FILE": str(marker)} if pause else {})}
    return subprocess.Popen(args, cwd="/", env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _crash_and_resume(python, env, run_id, point, receiver, tmp_path, *, retry=False) -> dict:
    marker = tmp_path / f"{run_id}.paused"
    first = _agent(python, env, run_id, receiver, pause=point, marker=marker)
    deadline = time.monotonic() + 30
    while not marker.exists():
        if first.poll() is not None:
            raise AssertionError(f"agent exited before pausing: {first.stdout.read()} {first.stderr.read()}")
        assert time.monotonic() < deadline, "agent never reached its pause point"
        time.sleep(0.02)
    first.send_signal(signal.SIGKILL)
    first.communicate(timeout=10)  # reaps it and closes its pipes
    assert first.returncode == -signal.SIGKILL
    second = _agent(python, env, run_id, receiver, retry=retry)
    out, err = second.communicate(timeout=60)
    assert second.returncode in (0, 3), f"agent failed ({second.returncode}): {err}"
    return json.loads(out.strip().splitlines()[-1])


def _uncertain_listed() -> list[dict]:
    # Detection is the scan the Celery beat runs every few seconds in production: a start whose
    # writer's epoch has been superseded becomes an uncertain call in the queue.
    uncertain_calls_detect()
    out = subprocess.run([PYTHON, "manage.py", "uncertain", "--json"], cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=60, check=True).stdout
    return json.loads(out)


def test_the_fresh_environment_has_the_client_and_no_django(fresh_python):
    assert subprocess.run([str(fresh_python), "-c", "import reckon_client, reckon_client.aio"], cwd="/").returncode == 0
    found = subprocess.run([str(fresh_python), "-c", "import django"], cwd="/", capture_output=True, text=True)
    assert found.returncode != 0 and "No module named 'django'" in found.stderr


def test_killed_mid_model_call_the_resumed_run_posts_the_correction_exactly_once(fresh_python, agent_env, receiver, tmp_path):
    result = _crash_and_resume(fresh_python, agent_env, "run-fresh-model", "model_call", receiver, tmp_path)
    assert result["status"] == "finished" and result["epoch"] == 2 and result["django"] is False
    assert receiver.total_effects == 1 and receiver.requests == 1
    state = run_state(run_id="run-fresh-model")
    assert state.status == "finished" and state.resumptions == 1 and len(state.completed_calls) == 1


def test_killed_mid_tool_execution_the_call_is_uncertain_in_reckon_and_nothing_runs(fresh_python, agent_env, receiver, tmp_path):
    result = _crash_and_resume(fresh_python, agent_env, "run-fresh-tool", "tool_execution", receiver, tmp_path)
    assert result["status"] == "uncertain"
    assert receiver.total_effects == 0  # the effect never happened, and the resumed run did not try
    assert [c.idempotency_key for c in run_state(run_id="run-fresh-tool").uncertain_calls] == [result["idempotency_key"]]
    listed = [c for c in _uncertain_listed() if c["run_id"] == "run-fresh-tool"]
    assert [(c["idempotency_key"], c["tool"]) for c in listed] == [(result["idempotency_key"], "post_correction")]


def test_killed_between_the_effect_and_its_completion_the_call_is_uncertain_and_nothing_runs_twice(fresh_python, agent_env, receiver, tmp_path):
    result = _crash_and_resume(fresh_python, agent_env, "run-fresh-effect", "after_effect", receiver, tmp_path)
    assert result["status"] == "uncertain"
    assert receiver.total_effects == 1 and receiver.requests == 1  # made once, before the kill; never again
    listed = [c for c in _uncertain_listed() if c["run_id"] == "run-fresh-effect"]
    assert [c["idempotency_key"] for c in listed] == [result["idempotency_key"]]
    starts = [e.payload for e in events_read(run_id="run-fresh-effect") if e.type == "tool_call_started"]
    assert [s["idempotency_key"] for s in starts] == [result["idempotency_key"]]


@pytest.mark.parametrize("point", ["tool_execution", "after_effect"])
def test_with_a_receiver_that_honours_the_key_a_retry_makes_the_effect_exactly_once(fresh_python, agent_env, receiver, tmp_path, point):
    run_id = f"run-fresh-retry-{point.replace('_', '-')}"
    result = _crash_and_resume(fresh_python, agent_env, run_id, point, receiver, tmp_path, retry=True)
    assert result["status"] == "finished"
    assert receiver.total_effects == 1 and set(receiver.effects.values()) == {1}
    keys = {e.payload["idempotency_key"] for e in events_read(run_id=run_id) if e.type == "tool_call_started"}
    assert keys == set(receiver.effects)  # the retry carried the original key
    state = run_state(run_id=run_id)
    assert state.status == "finished" and state.uncertain_calls == [] and len(state.completed_calls) == 1
