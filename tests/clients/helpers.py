"""What the client tests share: a tool that counts its effects, and the MCP agent (mcp_agent.py, the
SDK's client) driven through reckon-mcp-proxy, with its answers, its child processes and the
counting server's effects. The ``mcp_bin`` fixture (the environment holding them) is in conftest.py."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path


class CountingTool:
    """A tool with an effect counter: ``calls`` must not move when the log already has the answer."""

    def __init__(self, content):
        self.content = content
        self.calls = 0

    def __call__(self, arguments, *, idempotency_key):
        self.calls += 1
        return self.content


HERE = Path(__file__).parent


CORRECTION = {"account": "C-771", "amount": 840}


def _agent_env(extra: dict) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE", "DJANGO", "REDIS", "PYTHON"))}
    return {**env, **extra}


def _mcp_agent(mcp_bin: Path, proxy_args: list[str], calls: list[dict], env: dict, server: list[str] | None = None) -> subprocess.Popen:
    """The SDK's client (mcp_agent.py) taking ``calls`` through the proxy in front of ``server``
    (default: the counting server)."""
    server = server or [str(mcp_bin / "python"), str(HERE / "mcp_counter_server.py")]
    proxy = [str(mcp_bin / "reckon-mcp-proxy"), *proxy_args, "--", *server]
    return subprocess.Popen([str(mcp_bin / "python"), str(HERE / "mcp_agent.py"), *proxy, "--calls", json.dumps(calls)], cwd="/", env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _answers(agent: subprocess.Popen, timeout: float = 60) -> tuple[list[dict], str]:
    """The agent's JSON lines (its first lists the tools) and its stderr (the proxy's too)."""
    out, err = agent.communicate(timeout=timeout)
    return [json.loads(line) for line in out.strip().splitlines()], err


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def _effects(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
