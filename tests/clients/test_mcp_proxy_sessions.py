"""reckon-mcp-proxy's sessions, driven by the SDK's own client (mcp_agent.py) in the fresh ``mcp``
environment, against gunicorn on 127.0.0.1: what it refuses before recording anything, and how a
session starts and stops (the lease, run_finished, a run per session, a server that dies). Each
agent and each counting server is forked from a zygote (conftest.py); each proxy starts afresh."""

from __future__ import annotations

import re
import socket
import subprocess
import time

import pytest

from access.tokens import token_create
from runs.leases import lease_acquire, lease_release
from runs.store import events_read
from tests.clients.helpers import CORRECTION, _agent_env, _answers, _effects

pytestmark = pytest.mark.django_db(transaction=True)


def _types(run_id: str) -> list[str]:
    return [e.type for e in events_read(run_id=run_id)]


def _token(scopes=("append", "read")) -> str:
    return token_create(name="mcp proxy", scopes=list(scopes))[1]


def test_an_unknown_tool_and_arguments_its_schema_rejects_are_refused_and_nothing_is_recorded(server, mcp_agents, tmp_path):
    run_id = "run-mcp-refused"
    effects = tmp_path / "effects.jsonl"
    calls = [
        {"name": "post_corection", "arguments": CORRECTION},
        {"name": "post_correction", "arguments": {"account": "C-771", "amount": "eight hundred"}},
        {"name": "post_correction", "arguments": {"amount": 840}},
    ]
    agent = mcp_agents.start(["--url", server.url, "--token", _token(), "--run-id", run_id], calls, _agent_env({"MCP_EFFECTS_FILE": str(effects)}))
    lines, err = _answers(agent)
    unknown, wrong_type, missing = lines[1:]
    assert "unknown tool 'post_corection'" in unknown["error"] and "post_correction" in unknown["error"], err
    assert "do not match its inputSchema at $.amount" in wrong_type["error"], wrong_type
    assert "'account' is a required property" in missing["error"], missing
    assert _types(run_id) == ["run_started"]  # neither a start nor an uncertain call: nothing ran
    assert _effects(effects) == []


def test_a_call_during_shutdown_is_refused_unrecorded_while_the_running_one_completes(server, mcp_agents, tmp_path):
    run_id = "run-mcp-sigterm"
    effects = tmp_path / "effects.jsonl"
    hold = tmp_path / "answer"
    steps = [
        {"spawn": {"name": "post_correction", "arguments": CORRECTION}},
        {"until_lines": str(effects), "lines": 1},  # the correction is running: the server answers once ``hold`` has a line
        {"sigterm_proxy": True},
        {"until_stderr": "SIGTERM: new calls are refused"},
        {"name": "read_balance", "arguments": {"account": "C-771"}},
        {"write": str(hold), "text": "answer\n"},
        {"join": True},
    ]
    env = _agent_env({"MCP_EFFECTS_FILE": str(effects), "MCP_HOLD_FILE": str(hold)})
    lines, err = _answers(mcp_agents.start(["--url", server.url, "--token", _token(), "--run-id", run_id], steps, env))
    refused, running = lines[1:]
    assert "shutting down: read_balance was not recorded and did not run" in refused["error"], err
    assert '"posted": true' in running["result"]["content"][0]["text"], (running, err)
    assert _types(run_id) == ["run_started", "tool_call_started", "tool_call_completed"]
    assert [e.payload["name"] for e in events_read(run_id=run_id) if e.type == "tool_call_started"] == ["post_correction"]
    assert len(_effects(effects)) == 1


def test_a_session_without_run_id_gets_its_own_run_named_on_stderr_and_finished_on_disconnect(server, mcp_agents, tmp_path):
    env = _agent_env({"MCP_EFFECTS_FILE": str(tmp_path / "e.jsonl")})
    args = ["--url", server.url, "--token", _token(), "--run-prefix", "desk"]
    lines, err = _answers(mcp_agents.start(args, [{"name": "read_balance", "arguments": {"account": "C-1"}}], env))
    assert '"balance": 100' in lines[1]["result"]["content"][0]["text"], err
    run_id = re.search(r"recording in run (desk-\d{8}T\d{6}Z-[0-9a-f]{6}) \(a run for this session\)", err).group(1)
    assert f"run {run_id} finished" in err
    assert _types(run_id) == ["run_started", "tool_call_started", "tool_call_completed", "run_finished"]
    # The next session records into a run of its own.
    lines, err2 = _answers(mcp_agents.start(args, [], env))
    assert re.search(r"recording in run (desk-\S+)", err2).group(1) != run_id


def test_a_start_that_fails_after_taking_the_lease_releases_it(server, mcp_agents, tmp_path):
    run_id = "run-mcp-failed-start"
    env = _agent_env({"MCP_EFFECTS_FILE": str(tmp_path / "e.jsonl")})
    # A token without the read scope takes the lease, then cannot read the run's state.
    lines, err = _answers(mcp_agents.start(["--url", server.url, "--token", _token(["append"]), "--run-id", run_id, "--ttl", "30"], [], env))
    assert lines == [] and f"reckon-mcp-proxy: ClientError: {run_id}: HTTP 403: this token has no 'read' scope" in err, err
    began = time.monotonic()
    lines, err = _answers(mcp_agents.start(["--url", server.url, "--token", _token(), "--run-id", run_id, "--ttl", "30"], [{"name": "read_balance", "arguments": {"account": "C-1"}}], env))
    assert "result" in lines[1] and "waiting" not in err, err
    assert time.monotonic() - began < 15  # not the 30 s lease a leaked one would make it wait


def test_a_start_waiting_for_a_dead_holders_lease_says_so_with_the_time_left(server, mcp_agents, tmp_path):
    run_id = "run-mcp-dead-holder"
    gone = subprocess.Popen(["true"])
    gone.wait()  # a process of this machine that no longer runs holds the run's lease
    lease = lease_acquire(run_id=run_id, holder=f"{socket.gethostname()}:{gone.pid}", ttl_seconds=60)
    env = _agent_env({"MCP_EFFECTS_FILE": str(tmp_path / "e.jsonl")})
    agent = mcp_agents.start(["--url", server.url, "--token", _token(), "--run-id", run_id, "--ttl", "30"], [{"name": "read_balance", "arguments": {"account": "C-1"}}], env)
    notice, deadline = "", time.monotonic() + 40
    while "waiting" not in notice and time.monotonic() < deadline:
        notice = agent.stderr.readline()
    found = re.search(rf"run {run_id} is leased by '[^']+:{gone.pid}', a process that no longer runs; waiting (\d+) s for its lease to lapse", notice)
    assert found and 20 <= int(found.group(1)) <= 60, notice
    lease_release(run_id=run_id, epoch=lease.epoch)  # the lease lapses: the start goes on
    lines, err = _answers(agent)
    assert "result" in lines[1], err


def test_a_server_that_dies_at_start_is_named_with_its_exit_status(server, mcp_bin):
    done = subprocess.run(
        [str(mcp_bin / "reckon-mcp-proxy"), "--url", server.url, "--token", "t", "--", str(mcp_bin / "python"), "-c", "import sys; sys.exit(3)"],
        cwd="/",
        env=_agent_env({}),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "exited with status 3 before it answered initialize" in done.stderr, done.stderr


def test_a_host_names_its_own_operation_in_meta(server, mcp_agents, tmp_path):
    run_id = "run-mcp-host-operation"
    effects = tmp_path / "effects.jsonl"
    march, april = ({"name": "post_correction", "arguments": CORRECTION, "meta": {"io.reckon/operation-id": op}} for op in ("march", "april"))
    lines, err = _answers(mcp_agents.start(["--url", server.url, "--token", _token(), "--run-id", run_id], [march, march, april], _agent_env({"MCP_EFFECTS_FILE": str(effects)})))
    assert all("result" in line for line in lines[1:]), (lines, err)
    # The host's id names the action: "march" asked twice is one correction, "april" another.
    assert len(_effects(effects)) == 2
    assert [e.payload["operation_id"] for e in events_read(run_id=run_id) if e.type == "tool_call_started"] == ["march", "april"]


def test_a_policy_files_repeat_new_runs_a_call_a_later_session_asks_again(server, mcp_agents, mcp_bin, tmp_path):
    run_id = "run-mcp-repeat-policy"
    effects = tmp_path / "effects.jsonl"
    env = _agent_env({"MCP_EFFECTS_FILE": str(effects)})
    post = {"name": "post_correction", "arguments": CORRECTION}
    args = ["--url", server.url, "--token", _token(), "--run-id", run_id]
    _answers(mcp_agents.start(args, [post], env))
    # By default (not read-only, not idempotent) a later session asking the same is answered from the log...
    _answers(mcp_agents.start(args, [post], env))
    assert len(_effects(effects)) == 1
    # ... and with repeat = "new" it runs again, as the next operation.
    policies = tmp_path / "policies.toml"
    policies.write_text('[tools.post_correction]\nrisk_class = "irreversible"\nstrategy = "escalate"\nrepeat = "new"\n')
    lines, err = _answers(mcp_agents.start([*args, "--policies", str(policies)], [post], env))
    assert "result" in lines[1] and len(_effects(effects)) == 2, err
    assert [e.payload["operation_id"] for e in events_read(run_id=run_id) if e.type == "tool_call_started"][1] == "repeat@1"
    policies.write_text('[tools.post_correction]\nrepeat = "twice"\n')
    done = subprocess.run([str(mcp_bin / "reckon-mcp-proxy"), *args, "--policies", str(policies), "--", "true"], cwd="/", env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 1 and "tool 'post_correction': repeat 'twice' is not \"new\" or \"same\"" in done.stderr, done.stderr


def test_identical_calls_sent_at_once_are_two_operations_and_one_host_operation_is_one(server, mcp_agents, tmp_path):
    run_id = "run-mcp-at-once"
    effects = tmp_path / "effects.jsonl"
    env = _agent_env({"MCP_EFFECTS_FILE": str(effects)})
    post = {"name": "post_correction", "arguments": CORRECTION}
    march = {**post, "meta": {"io.reckon/operation-id": "march"}}
    args = ["--url", server.url, "--token", _token(), "--run-id", run_id]
    # Two identical calls in flight at once (the server answers neither until it has made both
    # effects), then the host's "march" twice at once (its effect answered once both were sent).
    hold = tmp_path / "answer"
    steps = [
        {"spawn": post},
        {"spawn": post},
        {"until_lines": str(effects), "lines": 2},
        {"write": str(hold), "text": "1\n2\n"},
        {"join": True},
        {"spawn": march},
        {"spawn": march},
        {"until_lines": str(effects), "lines": 3},
        {"write": str(hold), "text": "1\n2\n3\n"},
        {"join": True},
    ]
    lines, err = _answers(mcp_agents.start(args, steps, {**env, "MCP_HOLD_FILE": str(hold)}))
    assert all('"posted": true' in line["result"]["content"][0]["text"] for line in lines[1:]), (lines, err)
    keys = [e["key"] for e in _effects(effects)]
    assert len(keys) == 3 and len(set(keys)) == 3  # two operations, and one for "march"
    starts = [e.payload for e in events_read(run_id=run_id) if e.type == "tool_call_started"]
    assert sorted(s["operation_id"] for s in starts if s["operation_id"] != s["idempotency_key"]) == ["march", "repeat@1"]
    # A later session asking the same two at once computes the same two keys: answered from the log.
    lines, err = _answers(mcp_agents.start(args, [{"spawn": post}, {"spawn": post}, {"join": True}], env))
    assert all('"posted": true' in line["result"]["content"][0]["text"] for line in lines[1:]), (lines, err)
    assert len(_effects(effects)) == 3
    assert len([e for e in events_read(run_id=run_id) if e.type == "tool_call_started"]) == 3
