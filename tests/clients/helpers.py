"""What the client tests share: a tool that counts its effects, the examples' ledger in a process of
its own, and the MCP agent (mcp_agent.py, the SDK's client) driven through reckon-mcp-proxy, with
its answers, its child processes and the counting server's effects. The ``mcp_bin``,
``agent_env``, ``counter_server`` and ``mcp_agents`` fixtures are in conftest.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
import urllib.request
from pathlib import Path

from tests.api.live import PYTHON, ROOT
from tests.clients.forked import ForkedProcess, Zygote


class CountingTool:
    """A tool with an effect counter: ``calls`` must not move when the log already has the answer."""

    def __init__(self, content):
        self.content = content
        self.calls = 0

    def __call__(self, arguments, *, idempotency_key):
        self.calls += 1
        return self.content


HERE = Path(__file__).parent
EXAMPLES = ROOT / "examples"


class LedgerProcess:
    """examples/ledger.py on a free port, in its own process; ``stall_after=N`` answers the first N
    posts and stalls from the next one on (the effect made, its answer never sent)."""

    def __init__(self, *, stall_after: int | None = None):
        args = [PYTHON, str(EXAMPLES / "ledger.py"), "--port", "0", *(["--stall-after", str(stall_after)] if stall_after is not None else [])]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        m = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        assert m, f"the ledger did not start: {line!r}"
        self.url = m.group(0)

    def stats(self) -> dict:
        with urllib.request.urlopen(f"{self.url}/stats", timeout=5) as resp:
            return json.loads(resp.read())

    def stop(self) -> None:
        self.proc.kill()
        self.proc.communicate()  # reaps it and closes its pipe


CORRECTION = {"account": "C-771", "amount": 840}


def _agent_env(extra: dict) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE", "DJANGO", "REDIS", "PYTHON"))}
    return {**env, **extra}


class McpAgents:
    """The SDK's client (mcp_agent.py) taking steps through reckon-mcp-proxy in front of an MCP
    server (by default the counting one, ``server``), each agent forked from ``zygote``, a zygote
    of the ``mcp`` environment that imported the SDK once (tests/clients/forked.py). Each session is
    still an agent process of its own that starts a fresh proxy (a fresh interpreter), which starts
    the server. The ``mcp_agents`` fixture is in conftest.py."""

    def __init__(self, zygote: Zygote, mcp_bin: Path, server: list[str]):
        self.zygote, self.mcp_bin, self.server = zygote, mcp_bin, server

    def start(self, proxy_args: list[str], calls: list[dict], env: dict, server: list[str] | None = None) -> ForkedProcess:
        proxy = [str(self.mcp_bin / "reckon-mcp-proxy"), *proxy_args, "--", *(server or self.server)]
        return self.zygote.spawn([str(HERE / "mcp_agent.py"), *proxy, "--calls", json.dumps(calls)], env)


def _answers(agent: ForkedProcess | subprocess.Popen, timeout: float = 60) -> tuple[list[dict], str]:
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
