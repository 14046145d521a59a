"""A real MCP server (stdio, built with the SDK's MCPServer) whose tool has a side effect counted in
a file: one JSON line per correction posted, with the idempotency key it received in ``_meta``.

With MCP_PAUSE_FILE set, ``post_correction`` pauses after making its effect (its MCP_PAUSE_AT-th
effect, default the first): it writes its pid there
and waits to be killed (the test kills the proxy in front of it at that moment, then this process).
With MCP_SLOW_SECONDS set, it takes that long after its effect before answering. With MCP_HOLD_FILE
set, it answers its N-th effect only once that file has N lines (the test's agent writes them, once
what it waits for has happened: 60 s at most).
"""

import json
import os
import time

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ToolAnnotations

server = MCPServer("ledger")
EFFECTS = os.environ["MCP_EFFECTS_FILE"]


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False))
def post_correction(account: str, amount: int, ctx: Context) -> dict:
    """Post a ledger correction."""
    key = (ctx.request_context.meta or {}).get("io.reckon/idempotency-key")
    with open(EFFECTS, "a") as f:
        f.write(json.dumps({"key": key, "account": account, "amount": amount}) + "\n")
        f.flush()
        os.fsync(f.fileno())
    time.sleep(float(os.environ.get("MCP_SLOW_SECONDS", "0")))
    hold = os.environ.get("MCP_HOLD_FILE")
    if hold:
        made, give_up = len(open(EFFECTS).readlines()), time.monotonic() + 60
        while not (os.path.exists(hold) and len(open(hold).readlines()) >= made) and time.monotonic() < give_up:
            time.sleep(0.01)
    pause = os.environ.get("MCP_PAUSE_FILE")
    if pause and len(open(EFFECTS).readlines()) >= int(os.environ.get("MCP_PAUSE_AT", "1")):
        with open(pause, "w") as f:
            f.write(str(os.getpid()))
        while True:
            time.sleep(1)
    return {"posted": True, "account": account, "amount": amount}


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def read_balance(account: str) -> dict:
    """Read an account's balance."""
    return {"account": account, "balance": 100}


@server.tool(annotations=ToolAnnotations(read_only_hint=False, idempotent_hint=True))
def set_limit(account: str, limit: int) -> dict:
    """Set an account's limit (the same limit twice is one change)."""
    return {"account": account, "limit": limit}


@server.tool()
def refuse(account: str) -> str:
    """Always refuses: a proven failure."""
    raise ValueError(f"account {account} is closed")


# Beyond tools, relayed by the proxy unchanged: a resource, a resource template, a prompt, and a
# tool that sends the host a log notification as it runs.


@server.resource("ledger://readme")
def readme() -> str:
    """What the ledger is."""
    return "The ledger of corrections."


@server.resource("ledger://accounts/{account}")
def account_resource(account: str) -> str:
    """One account."""
    return json.dumps({"account": account, "balance": 100})


@server.prompt()
def review(account: str) -> str:
    """Ask for a review of an account."""
    return f"Review account {account}."


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def announce(text: str, ctx: Context) -> str:
    """Log ``text`` to the host."""
    await ctx.info(text)
    return "announced"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def ask_host(question: str, ctx: Context) -> str:
    """Ask the host's model (sampling, a request from server to client)."""
    from mcp_types import SamplingMessage, TextContent

    answer = await ctx.session.create_message(messages=[SamplingMessage(role="user", content=TextContent(type="text", text=question))], max_tokens=20)
    return answer.content.text


if __name__ == "__main__":
    server.run("stdio")
