"""reckon-mcp-proxy with a real MCP server and a real MCP client, both built with the SDK, in a fresh
environment holding only ``reckon-client[mcp]``; Reckon is gunicorn on 127.0.0.1.

The server's tool counts its effects in a file. The proxy is SIGKILLed while the tool runs (after
its effect): the call is uncertain in Reckon, reconciliation's lookup finds the effect under the key
the proxy passed in ``_meta``, and a fresh proxy asked for the same call answers from the log. The
effect count stays 1."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from access.tokens import token_create
from recovery.detection import uncertain_calls_detect
from runs.selectors import run_state
from runs.store import events_read
from tests.api.live import PYTHON, ROOT, child_env
from tests.clients.helpers import CORRECTION, _agent_env, _children, _effects
from tests.helpers import serve_in_thread

pytestmark = pytest.mark.django_db(transaction=True)


class Lookup:
    """The ledger's authoritative lookup for reconciliation: the effects file, by idempotency key."""

    def __init__(self, effects: Path):
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                key = self.path.rsplit("/", 1)[-1]
                lines = [json.loads(line) for line in effects.read_text().splitlines()] if effects.exists() else []
                found = [e for e in lines if e["key"] == key]
                status, body = (200, found[0]) if found else (404, {"final": True})
                out = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        serve_in_thread(self.httpd)

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def _manage(*args: str) -> str:
    done = subprocess.run([PYTHON, "manage.py", *args], cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"manage.py {' '.join(args)}: {done.stderr}"
    return done.stdout


def test_a_proxy_killed_mid_call_leaves_it_uncertain_and_reconciliation_keeps_the_effect_count_at_one(server, mcp_agents, tmp_path):
    run_id = "run-mcp-kill"
    token = token_create(name="mcp proxy", scopes=["append", "read"])[1]
    effects, paused = tmp_path / "effects.jsonl", tmp_path / "paused"
    proxy_args = ["--url", server.url, "--token", token, "--run-id", run_id, "--ttl", "1"]
    env = _agent_env({"MCP_EFFECTS_FILE": str(effects)})

    agent = mcp_agents.start(proxy_args, [{"name": "post_correction", "arguments": CORRECTION}], {**env, "MCP_PAUSE_FILE": str(paused)})
    deadline = time.monotonic() + 60
    while not paused.exists() or not paused.read_text():
        assert agent.poll() is None, f"agent exited early: {agent.stdout.read()} {agent.stderr.read()}"
        assert time.monotonic() < deadline, "the tool never ran"
        time.sleep(0.05)
    proxies = [p for p in _children(agent.pid) if "reckon-mcp-proxy" in Path(f"/proc/{p}/cmdline").read_text()]
    assert len(proxies) == 1
    os.kill(proxies[0], signal.SIGKILL)  # the proxy dies while the tool runs, after its effect
    os.kill(int(paused.read_text()), signal.SIGKILL)  # and the server it started with it
    out, err = agent.communicate(timeout=30)
    assert "result" not in out.strip().splitlines()[-1], "the agent must not get a result from a dead proxy"

    [effect] = _effects(effects)
    starts = [e.payload for e in events_read(run_id=run_id) if e.type == "tool_call_started"]
    assert [s["idempotency_key"] for s in starts] == [effect["key"]]  # the key travelled in _meta

    # Detection is the scan the beat runs: it marks the call once the proxy's lease (1 s) has lapsed.
    deadline = time.monotonic() + 30
    while not uncertain_calls_detect()["marked"] and time.monotonic() < deadline:
        time.sleep(0.05)
    listed = [c for c in json.loads(_manage("uncertain", "--json")) if c["run_id"] == run_id]
    assert [(c["tool"], c["idempotency_key"], c["state"]) for c in listed] == [("post_correction", effect["key"], "open")]

    lookup = Lookup(effects)
    try:
        policy = tmp_path / "policies.toml"
        policy.write_text(
            '[tools.post_correction]\nrisk_class = "irreversible"\nstrategy = "reconcile_then_retry"\n'
            'semantic_fields = ["account", "amount"]\ndeadline = "15m"\n'
            f'lookup = {{ adapter = "http", url = "{lookup.url}/operations/{{idempotency_key}}", timeout = "2s" }}\n'
        )
        _manage("load_policies", str(policy))
        _manage("reconcile", "--once")
    finally:
        lookup.stop()
    state = run_state(run_id=run_id)
    assert state.uncertain_calls == [] and effect["key"] in state.completed_calls
    assert len(_effects(effects)) == 1

    # A fresh proxy on the same run, asked for the same correction, answers from the log; a tool
    # answering isError is a proven failure, recorded as one.
    again = mcp_agents.start(proxy_args, [{"name": "post_correction", "arguments": CORRECTION}, {"name": "refuse", "arguments": {"account": "C-1"}}], env)
    out, err = again.communicate(timeout=60)
    lines = [json.loads(line) for line in out.strip().splitlines()]
    assert lines[0]["tools"] == ["announce", "ask_host", "post_correction", "read_balance", "refuse", "set_limit"], err
    # Answered from the log: the operation reconciliation observed, the server not called again.
    assert lines[1]["result"]["structuredContent"] == {"key": effect["key"], "account": "C-771", "amount": "840"}, lines[1]
    assert lines[2]["result"]["isError"] is True
    assert len(_effects(effects)) == 1
    done = [e.payload for e in events_read(run_id=run_id) if e.type == "tool_call_completed"]
    assert [(d["name"], d["is_error"], d["source"]) for d in done] == [("post_correction", False, "reconciliation"), ("refuse", True, "live")]


def test_printed_policies_load_with_load_policies(mcp_bin, counter_server, tmp_path):
    printed = subprocess.run(
        [str(mcp_bin / "reckon-mcp-proxy"), "--print-policies", "--", *counter_server],
        cwd="/",
        env=_agent_env({"MCP_EFFECTS_FILE": str(tmp_path / "e.jsonl")}),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert printed.returncode == 0, printed.stderr
    import tomllib

    repeats = {name: t["repeat"] for name, t in tomllib.loads(printed.stdout)["tools"].items()}
    assert repeats == {"announce": "new", "ask_host": "new", "post_correction": "same", "read_balance": "new", "refuse": "same", "set_limit": "new"}
    path = tmp_path / "policies.toml"
    path.write_text(printed.stdout)
    _manage("load_policies", str(path))
    from recovery.selectors import policy_for

    assert policy_for("read_balance").risk_class == "read_only"
    assert policy_for("set_limit").risk_class == "idempotent"
    assert policy_for("post_correction").risk_class == "irreversible" and not policy_for("post_correction").unclassified


def test_the_proxy_names_a_missing_option_in_one_line(mcp_bin):
    done = subprocess.run([str(mcp_bin / "reckon-mcp-proxy"), "--url", "http://127.0.0.1:1", "--", "true"], cwd="/", env=_agent_env({}), capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "--token (or RECKON_TOKEN) is required" in done.stderr and "Traceback" not in done.stderr
