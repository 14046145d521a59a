"""The crash regression test through the in-process agent client and real processes (docs/agents.md).
The same over HTTP, with the agent client installed alone in a fresh environment, is
tests/clients/test_fresh_venv.py (both take the ``server`` fixture of tests/conftest.py).

An agent process posts a ledger correction and is killed with SIGKILL at one of three points: mid
model call, mid tool execution (start recorded, effect not made), and between the side effect and
its completion event. A fresh process opens the same run id. Afterwards the effect exists exactly
once, or the call is uncertain (left for reconciliation) and nothing ran twice.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from access.tokens import token_create
from runs.selectors import run_state
from runs.store import events_read
from tests.api.live import PYTHON, ROOT, EffectReceiver, child_env

pytestmark = pytest.mark.django_db(transaction=True)

TTL = "1"  # lease seconds of the killed process: the fresh one waits at most this long


@pytest.fixture
def receiver():
    r = EffectReceiver()
    yield r
    r.stop()


def _agent(run_id: str, *, effect: list[str], pause: str | None, marker, retry: bool = False):
    args = [PYTHON, "manage.py", "demo_agent", "--run-id", run_id, "--ttl", TTL, *effect]
    if retry:
        args.append("--retry-uncertain")
    env = child_env(**({"RECKON_FAULT_AT": pause, "RECKON_FAULT_FILE": str(marker)} if pause else {}))
    if not pause:
        env.pop("RECKON_FAULT_AT", None)
    return subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _kill_when_paused(proc, marker) -> None:
    deadline = time.monotonic() + 30
    while not os.path.exists(marker):
        if proc.poll() is not None:
            raise AssertionError(f"agent exited before pausing: {proc.stdout.read()} {proc.stderr.read()}")
        assert time.monotonic() < deadline, "agent never reached its pause point"
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=10)  # reaps it and closes its pipes
    assert proc.returncode == -signal.SIGKILL


def _finish(proc) -> dict:
    out, err = proc.communicate(timeout=60)
    assert proc.returncode in (0, 3), f"agent failed ({proc.returncode}): {err}"
    return json.loads(out.strip().splitlines()[-1])


def _crash_and_resume(run_id, point, tmp_path, *, effect, retry=False) -> dict:
    marker = tmp_path / f"{run_id}.paused"
    first = _agent(run_id, effect=effect, pause=point, marker=marker)
    _kill_when_paused(first, marker)
    second = _agent(run_id, effect=effect, pause=None, marker=marker, retry=retry)
    return _finish(second)


def _starts(run_id: str) -> list[dict]:
    return [e.payload for e in events_read(run_id=run_id) if e.type == "tool_call_started"]


@pytest.fixture
def agent_token():
    return token_create(name="crash-test agent", scopes=["append", "read"], tenants=["acme"])[1]


def test_through_the_store_directly_a_kill_after_the_effect_leaves_one_effect_and_an_uncertain_call(tmp_path):
    effects = tmp_path / "effects.jsonl"
    result = _crash_and_resume("run-crash-store", "after_effect", tmp_path, effect=["--effect-file", str(effects)])
    assert result["status"] == "uncertain"
    assert len(effects.read_text().splitlines()) == 1
    assert [c.idempotency_key for c in run_state(run_id="run-crash-store").uncertain_calls] == [result["idempotency_key"]]
