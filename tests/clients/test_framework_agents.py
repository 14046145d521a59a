"""The examples, run as an agent developer runs them: each in a fresh environment holding only the
client and its extra (no Django), against a live Reckon (gunicorn on 127.0.0.1) and the examples'
ledger service (examples/ledger.py, a real HTTP server in its own process).

The LangGraph and Pydantic AI agents are real graphs and agents driven by their frameworks' own
offline test models, calling two tools: killed with SIGKILL inside the second (the ledger has made
the effect and stalls its answer), then resumed: the first tool is not run again (its result comes
from the log), and the second is uncertain in Reckon instead of being posted twice.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from recovery.detection import uncertain_calls_detect
from runs.selectors import run_state
from runs.store import events_read
from tests.api.live import PYTHON, ROOT, child_env
from tests.clients.helpers import EXAMPLES, LedgerProcess
from tests.clients.venvs import client_python

pytestmark = pytest.mark.django_db(transaction=True)


def _start(python: Path, example: str, env: dict) -> subprocess.Popen:
    return subprocess.Popen([str(python), str(EXAMPLES / example)], cwd="/", env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _uncertain_listed(run_id: str) -> list[dict]:
    # Detection is the scan the Celery beat runs every few seconds in production.
    uncertain_calls_detect()
    out = subprocess.run([PYTHON, "manage.py", "uncertain", "--json"], cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=60, check=True).stdout
    return [c for c in json.loads(out) if c["run_id"] == run_id]


def _kill_inside_the_second_tool_and_resume(python: Path, example: str, run_id: str, env: dict) -> tuple[LedgerProcess, subprocess.CompletedProcess]:
    ledger = LedgerProcess(stall_after=0)
    env = {**env, "RECKON_RUN_ID": run_id, "LEDGER_URL": ledger.url}
    first = _start(python, example, env)
    try:
        deadline = time.monotonic() + 60
        while not ledger.stats()["effects"]:  # the correction is posted; its answer never comes
            if first.poll() is not None:
                raise AssertionError(f"{example} exited ({first.returncode}) before posting: {first.stdout.read()} {first.stderr.read()}")
            assert time.monotonic() < deadline, f"{example} never reached its second tool"
            time.sleep(0.05)
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=10)  # reaps it and closes its pipes
        assert first.returncode == -signal.SIGKILL
        second = subprocess.run([str(python), str(EXAMPLES / example)], cwd="/", env=env, capture_output=True, text=True, timeout=120)
    except BaseException:
        ledger.stop()
        raise
    return ledger, second


@pytest.mark.parametrize("extra, example", [("langgraph", "langgraph_agent.py"), ("pydantic-ai", "pydantic_ai_agent.py")])
def test_a_framework_agent_killed_inside_its_second_tool_resumes_without_repeating_the_first(agent_env, extra, example):
    run_id = f"run-example-{extra}"
    ledger, second = _kill_inside_the_second_tool_and_resume(client_python(extra), example, run_id, agent_env)
    try:
        stats = ledger.stats()
    finally:
        ledger.stop()
    assert second.returncode == 3, f"resumed {example}: {second.returncode}\n{second.stdout}\n{second.stderr}"
    assert "epoch 2" in second.stdout and "uncertain:" in second.stdout
    # The balance was read once, by the killed process: the resumed graph got it from the log.
    assert stats["reads"] == 1
    # The correction was posted once, by the killed process, and not again.
    assert list(stats["effects"].values()) == [1]
    posted_key = next(iter(stats["effects"]))
    events = events_read(run_id=run_id)
    starts = [(e.payload["name"], e.payload["idempotency_key"]) for e in events if e.type == "tool_call_started"]
    assert [name for name, _ in starts] == ["look_up_balance", "post_correction"]  # neither started twice
    assert starts[1][1] == posted_key  # the tool passed the recorded key on to the ledger
    state = run_state(run_id=run_id)
    assert state.resumptions == 1 and len(state.completed_calls) == 1
    assert [c.idempotency_key for c in state.uncertain_calls] == [posted_key]
    assert [(c["tool"], c["idempotency_key"]) for c in _uncertain_listed(run_id)] == [("post_correction", posted_key)]


def test_the_ten_line_agent_posts_its_correction_once_and_finishes_its_run(agent_env):
    ledger = LedgerProcess()
    try:
        done = subprocess.run([str(client_python("plain")), str(EXAMPLES / "ten_line_agent.py")], cwd="/", env={**agent_env, "LEDGER_URL": ledger.url}, capture_output=True, text=True, timeout=60)
        stats = ledger.stats()
    finally:
        ledger.stop()
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.split()[0]
    assert list(stats["effects"].values()) == [1]
    state = run_state(run_id=run_id)
    assert state.status == "finished" and list(state.completed_calls) == list(stats["effects"])


def test_the_mcp_example_records_both_calls_through_the_proxy(agent_env):
    ledger = LedgerProcess()
    env = {**agent_env, "LEDGER_URL": ledger.url, "RECKON_RUN_ID": "run-example-mcp"}
    try:
        done = subprocess.run([str(client_python("mcp")), str(EXAMPLES / "mcp" / "agent.py")], cwd="/", env=env, capture_output=True, text=True, timeout=120)
        stats = ledger.stats()
    finally:
        ledger.stop()
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    assert stats["reads"] == 1 and list(stats["effects"].values()) == [1]
    completions = [e.payload for e in events_read(run_id="run-example-mcp") if e.type == "tool_call_completed"]
    assert [(c["name"], c["is_error"]) for c in completions] == [("look_up_balance", False), ("post_correction", False)]
    assert completions[1]["idempotency_key"] == next(iter(stats["effects"]))  # the key reached the ledger through _meta
