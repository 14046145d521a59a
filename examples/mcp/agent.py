"""An MCP client (the official SDK over stdio) standing in for an agent whose tools live in an MCP
server: it starts ``reckon-mcp-proxy`` in front of ``ledger_server.py`` and calls the two tools
through it. The agent and the server are unchanged; the proxy records every ``tools/call`` in Reckon.

    RECKON_URL=http://127.0.0.1:8000 RECKON_TOKEN=... RECKON_RUN_ID=run-mcp-1 python examples/mcp/agent.py

Exit 0: both calls answered; 3: a call is uncertain (the proxy answered with Reckon's error).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
from pathlib import Path

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

HERE = Path(__file__).resolve().parent
# Installed with reckon-client[mcp]: on PATH, or beside this interpreter in its virtual environment.
PROXY = shutil.which("reckon-mcp-proxy") or str(Path(sys.executable).with_name("reckon-mcp-proxy"))


async def main() -> int:
    os.environ.setdefault("RECKON_RUN_ID", "run-mcp-example")
    # reckon-mcp-proxy reads RECKON_URL, RECKON_TOKEN and RECKON_RUN_ID; after "--" comes the real server.
    proxy = StdioServerParameters(command=PROXY, args=["--", sys.executable, str(HERE / "ledger_server.py")], env=dict(os.environ))
    async with stdio_client(proxy) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        for name, arguments in [("look_up_balance", {"account": "C-771"}), ("post_correction", {"account": "C-771", "amount": 840})]:
            try:
                result = await session.call_tool(name, arguments)
            except Exception as exc:  # the proxy's JSON-RPC error: the call is uncertain in Reckon
                print(f"uncertain: {name}: {exc}", flush=True)
                return 3
            print(name, json.dumps(result.structured_content or [c.model_dump(mode="json") for c in result.content]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
