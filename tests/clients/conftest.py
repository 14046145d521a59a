"""The client tests' environments: the MCP one's scripts (the proxy, and the Python that runs the
agent and the counting server), built once per version of the client's sources (venvs.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.clients.venvs import client_python


@pytest.fixture(scope="session")
def mcp_bin() -> Path:
    return client_python("mcp").parent
