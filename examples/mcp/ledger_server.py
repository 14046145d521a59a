"""An MCP server (stdio, built with the official SDK) offering the ledger's two tools. Its tools
know nothing of Reckon except one thing: the idempotency key that reckon-mcp-proxy puts in each
call's ``_meta["io.reckon/idempotency-key"]``, passed on to the ledger so a repeat is one effect.

Their annotations say what each tool risks; ``reckon-mcp-proxy --print-policies`` turns them into a
starting policy file."""

from __future__ import annotations

import sys
from pathlib import Path

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ToolAnnotations

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # examples/ledger_tools.py
from ledger_tools import ledger  # noqa: E402

server = MCPServer("ledger")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def look_up_balance(account: str) -> dict:
    """Read an account's balance."""
    return ledger.balance(account)


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False))
def post_correction(account: str, amount: int, ctx: Context) -> dict:
    """Post a correction to an account."""
    key = (ctx.request_context.meta or {}).get("io.reckon/idempotency-key")
    if not key:
        raise ValueError("no idempotency key in _meta: call this server through reckon-mcp-proxy")
    return ledger.post(account, amount, idempotency_key=key)


if __name__ == "__main__":
    server.run()
