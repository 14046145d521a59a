"""The client tests' environments: the MCP one's scripts (the proxy, and the Python that runs the
agent and the counting server), built once per version of the client's sources (venvs.py), and
the environment of an agent process that talks to the live server."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.clients.venvs import client_python


@pytest.fixture(scope="session")
def mcp_bin() -> Path:
    return client_python("mcp").parent


@pytest.fixture
def agent_env(server) -> dict:
    """An agent process's environment: only what an agent's machine has (no DATABASE_URL, no
    Django settings, no project on the path), the live server and a token, and a one-second lease
    so a resumed process need not wait long for its killed predecessor's."""
    from access.tokens import token_create

    token = token_create(name="example agent", scopes=["append", "read"])[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE", "DJANGO", "REDIS", "PYTHON"))}
    return {**env, "RECKON_URL": server.url, "RECKON_TOKEN": token, "RECKON_LEASE_SECONDS": "1"}
