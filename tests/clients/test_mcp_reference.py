"""Intentional repeats through reckon-mcp-proxy, with reference MCP servers nobody here wrote
(``mcp-server-git``, ``mcp-server-time``, the npm ``@modelcontextprotocol/server-filesystem``, pinned
in tests/clients/venvs.py and cached under var/mcp-reference), driven by the SDK's own client.

Within a session, a call asked again after the same call completed reaches the server; a session
resumed after a SIGKILL that asks the same things again is answered from the log for what completed
and told the killed call is uncertain (docs/agents.md, "Intentional repeats")."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from access.tokens import token_create
from runs.store import events_read
from tests.clients.helpers import CORRECTION, _agent_env, _answers, _children, _effects
from tests.clients.venvs import reference_servers

pytestmark = pytest.mark.django_db(transaction=True)

GIT_ENV = {"GIT_AUTHOR_NAME": "Agent", "GIT_AUTHOR_EMAIL": "agent@example.org", "GIT_COMMITTER_NAME": "Agent", "GIT_COMMITTER_EMAIL": "agent@example.org"}


@pytest.fixture(scope="session")
def reference() -> Path:
    return reference_servers()


def _session(server, mcp_agents, steps, command=None, env=None, run_id=None):
    """One host session through the proxy in front of ``command`` (default: the counting server),
    a run of its own unless ``run_id``: the answers, the stderr and the run's id."""
    args = ["--url", server.url, "--token", token_create(name="mcp proxy", scopes=["append", "read"])[1], *(["--run-id", run_id] if run_id else [])]
    lines, err = _answers(mcp_agents.start(args, steps, _agent_env({**GIT_ENV, **(env or {})}), server=command))
    return lines[1:], err, run_id or re.search(r"recording in run (\S+)", err).group(1)


def _starts(run_id: str, name: str) -> list[dict]:
    return [e.payload for e in events_read(run_id=run_id) if e.type == "tool_call_started" and e.payload["name"] == name]


def _operations(run_id: str, name: str) -> list[str | None]:
    """Each start's operation id; None for the action itself (the store records its key there)."""
    return [None if s["operation_id"] == s["idempotency_key"] else s["operation_id"] for s in _starts(run_id, name)]


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env={**os.environ, **GIT_ENV}).stdout


def test_a_second_commit_of_the_same_message_reaches_git(server, mcp_agents, reference, tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "notes.txt").write_text("0\n")
    _git(repo, "add", "notes.txt")
    _git(repo, "commit", "-qm", "start")
    add = {"name": "git_add", "arguments": {"repo_path": str(repo), "files": ["notes.txt"]}}
    commit = {"name": "git_commit", "arguments": {"repo_path": str(repo), "message": "wip"}}
    steps = [{"write": str(repo / "notes.txt"), "text": "1\n"}, add, commit, {"write": str(repo / "notes.txt"), "text": "2\n"}, add, commit]
    answers, err, run_id = _session(server, mcp_agents, steps, [str(reference / "bin" / "mcp-server-git")])
    hashes = [re.search(r"hash (\w+)", a["result"]["content"][0]["text"]).group(1) for a in (answers[1], answers[3])]
    assert hashes[0] != hashes[1], (answers, err)
    assert _git(repo, "rev-list", "--count", "HEAD").strip() == "3" and _git(repo, "status", "--porcelain") == ""
    assert _operations(run_id, "git_commit") == [None, "repeat@1"]


def test_writing_a_then_b_then_a_leaves_a_on_disk(server, mcp_agents, reference, tmp_path):
    target = tmp_path / "file.txt"
    steps = [{"name": "write_file", "arguments": {"path": str(target), "content": text}} for text in ("A", "B", "A")]
    answers, err, run_id = _session(server, mcp_agents, steps, [str(reference / "node_modules" / ".bin" / "mcp-server-filesystem"), str(tmp_path)])
    assert all("result" in a and not a["result"].get("isError") for a in answers), (answers, err)
    assert target.read_text() == "A"
    assert _operations(run_id, "write_file") == [None, None, "repeat@1"]


def test_asking_the_time_twice_reaches_the_server_twice(server, mcp_agents, reference):
    ask = {"name": "get_current_time", "arguments": {"timezone": "UTC"}}
    # The server tells the time to the second: the second ask comes in a later second than the first.
    answers, err, run_id = _session(server, mcp_agents, [ask, {"next_second": True}, ask], [str(reference / "bin" / "mcp-server-time")])
    times = [a["result"]["content"][0]["text"] for a in answers if "result" in a]
    assert len(times) == 2 and times[0] != times[1], (answers, err)
    assert len({s["idempotency_key"] for s in _starts(run_id, "get_current_time")}) == 2


def test_a_resumed_session_answers_completed_calls_from_the_log_and_leaves_the_killed_one_uncertain(server, mcp_agents, tmp_path):
    run_id = "run-mcp-repeat-resume"
    effects, paused = tmp_path / "effects.jsonl", tmp_path / "paused"
    post = {"name": "post_correction", "arguments": CORRECTION}
    token = token_create(name="mcp proxy", scopes=["append", "read"])[1]
    args = ["--url", server.url, "--token", token, "--run-id", run_id, "--ttl", "1"]
    # The second, intentional, correction is killed after its effect, with the proxy.
    env = _agent_env({"MCP_EFFECTS_FILE": str(effects), "MCP_PAUSE_FILE": str(paused), "MCP_PAUSE_AT": "2"})
    agent = mcp_agents.start(args, [post, post], env)
    deadline = time.monotonic() + 60
    while not paused.exists() or not paused.read_text():
        assert agent.poll() is None and time.monotonic() < deadline, "the second correction never ran"
        time.sleep(0.05)
    [proxy] = [p for p in _children(agent.pid) if "reckon-mcp-proxy" in Path(f"/proc/{p}/cmdline").read_text()]
    os.kill(proxy, signal.SIGKILL)
    os.kill(int(paused.read_text()), signal.SIGKILL)
    agent.communicate(timeout=30)
    assert len(_effects(effects)) == 2

    # The host starts again on the same run and asks the same two things.
    lines, err = _answers(mcp_agents.start(args, [post, post], _agent_env({"MCP_EFFECTS_FILE": str(effects)})))
    first, second = lines[1:]
    assert '"posted": true' in first["result"]["content"][0]["text"], (first, err)  # from the log
    assert "never completed" in second["error"] and "uncertain" not in first, (second, err)
    assert len(_effects(effects)) == 2  # neither reached the server again
    assert _operations(run_id, "post_correction") == [None, "repeat@1"]
    starts = _starts(run_id, "post_correction")
    assert [e["key"] for e in _effects(effects)] == [s["idempotency_key"] for s in starts]


def test_resources_prompts_sampling_and_log_notifications_are_relayed_unchanged_and_unrecorded(server, mcp_agents, tmp_path):
    # mcp-server-git offers neither resources nor prompts: the SDK-built counting server does.
    steps = [
        {"list_resources": True},
        {"list_templates": True},
        {"read": "ledger://accounts/C-9"},
        {"list_prompts": True},
        {"prompt": "review", "arguments": {"account": "C-9"}},
        {"name": "announce", "arguments": {"text": "through the proxy"}},
        {"name": "ask_host", "arguments": {"question": "ready?"}},
    ]
    answers, err, run_id = _session(server, mcp_agents, steps, env={"MCP_EFFECTS_FILE": str(tmp_path / "e.jsonl")})
    resources, templates, read, prompts, prompt, announced, asked, logs = answers
    assert [r["uri"] for r in resources["resources"]["resources"]] == ["ledger://readme"], (answers, err)
    assert [t["uriTemplate"] for t in templates["templates"]["resourceTemplates"]] == ["ledger://accounts/{account}"]
    assert read["read"]["contents"][0]["text"] == '{"account": "C-9", "balance": 100}'
    assert [p["name"] for p in prompts["prompts"]["prompts"]] == ["review"]
    assert prompt["prompt"]["messages"][0]["content"]["text"] == "Review account C-9."
    assert logs == {"logs": ["through the proxy"]} and "result" in announced
    assert asked["result"]["content"][0]["text"] == "the host's model read: ready?", asked  # sampling, server to host
    # Only the tools/calls are in the run.
    assert [p["name"] for p in (e.payload for e in events_read(run_id=run_id)) if "name" in p] == ["announce", "announce", "ask_host", "ask_host"]


def test_the_hosts_roots_reach_the_filesystem_server(server, mcp_agents, reference, tmp_path):
    given, rooted = tmp_path / "given", tmp_path / "rooted"
    given.mkdir()
    rooted.mkdir()
    # The server asks for the roots once the session starts and learns them in the background.
    steps = [{"name": "list_allowed_directories", "arguments": {}, "until": str(rooted)}, {"name": "write_file", "arguments": {"path": str(rooted / "f.txt"), "content": "via roots"}}]
    fs = [str(reference / "node_modules" / ".bin" / "mcp-server-filesystem"), str(given)]
    answers, err, run_id = _session(server, mcp_agents, steps, fs, env={"AGENT_ROOTS": str(rooted)})
    allowed, written = answers
    assert str(rooted) in allowed["result"]["content"][0]["text"] and str(given) not in allowed["result"]["content"][0]["text"], (answers, err)
    assert (rooted / "f.txt").read_text() == "via roots", (written, err)
