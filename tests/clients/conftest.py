"""The client tests' environments: the MCP one's scripts (the proxy, and the Python that runs the
agent and the counting server), built once per version of the client's sources (venvs.py), the
zygotes the MCP tests fork their agents and the counting server from (forked.py), and the
environment of an agent process that talks to the live server."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.clients.forked import ListeningZygote, Zygote
from tests.clients.helpers import HERE, McpAgents, _agent_env
from tests.clients.venvs import client_python


@pytest.fixture(scope="session")
def mcp_bin() -> Path:
    return client_python("mcp").parent


@pytest.fixture(scope="session")
def counter_server(mcp_bin) -> list[str]:
    """The command that starts the counting MCP server (mcp_counter_server.py), as reckon-mcp-proxy
    runs it: a process of its own with the proxy's stdio and environment, forked from a zygote of
    the ``mcp`` environment that imported the SDK's server once. Only a process started by a test
    is forked (the agent, this server): the proxy, what the tests are about, starts afresh."""
    zygote = ListeningZygote(mcp_bin / "python", ["mcp.server.mcpserver", "mcp_types"], _agent_env({}))
    yield zygote.command(HERE / "mcp_counter_server.py")
    zygote.stop()


@pytest.fixture(scope="session")
def mcp_agents(mcp_bin, counter_server) -> McpAgents:
    """The SDK's client, forked from a zygote of the ``mcp`` environment, each in front of a fresh
    reckon-mcp-proxy (helpers.McpAgents). Shared by the MCP modules of a test process: a zygote
    keeps nothing of one agent for the next."""
    zygote = Zygote(mcp_bin / "python", ["mcp", "mcp.client.stdio", "mcp_types"], _agent_env({}))
    yield McpAgents(zygote, mcp_bin, counter_server)
    zygote.stop()


@pytest.fixture
def agent_env(server) -> dict:
    """An agent process's environment: only what an agent's machine has (no DATABASE_URL, no
    Django settings, no project on the path), the live server and a token, and a one-second lease
    so a resumed process need not wait long for its killed predecessor's."""
    from access.tokens import token_create

    token = token_create(name="example agent", scopes=["append", "read"])[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE", "DJANGO", "REDIS", "PYTHON"))}
    return {**env, "RECKON_URL": server.url, "RECKON_TOKEN": token, "RECKON_LEASE_SECONDS": "1"}
