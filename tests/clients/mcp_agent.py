"""A real MCP client (the SDK's ClientSession over stdio) that starts reckon-mcp-proxy in front of the
counting server and calls a tool through it. Prints one JSON line per step."""

import asyncio
import json
import os
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


async def main(proxy: list[str], calls: list[dict]) -> None:
    async with stdio_client(StdioServerParameters(command=proxy[0], args=proxy[1:], env=dict(os.environ))) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = await session.list_tools()
        print(json.dumps({"tools": sorted(t.name for t in tools.tools)}), flush=True)
        for call in calls:
            try:
                result = await session.call_tool(call["name"], call["arguments"])
                print(json.dumps({"result": result.model_dump(mode="json", by_alias=True, exclude_none=True)}), flush=True)
            except Exception as exc:  # the proxy's JSON-RPC error, or its connection dropped
                print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)


if __name__ == "__main__":
    sep = sys.argv.index("--calls")
    asyncio.run(main(sys.argv[1:sep], json.loads(sys.argv[sep + 1])))
