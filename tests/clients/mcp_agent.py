"""A real MCP client (the SDK's ClientSession over stdio) that starts reckon-mcp-proxy in front of an
MCP server and takes steps through it. Prints one JSON line per step that answers.

A step is a call ``{"name": ..., "arguments": ..., "meta": {...}}``, or one of
``{"spawn": CALL}`` (start the call and go on), ``{"join": true}`` (print the spawned calls'
answers), ``{"sleep": SECONDS}``, ``{"sigterm_proxy": true}`` (SIGTERM the proxy, this process's
child), ``{"write": PATH, "text": TEXT}`` (the agent edits a file itself), and the rest of the
protocol: ``{"list_resources": true}``, ``{"list_templates": true}``, ``{"read": URI}``,
``{"list_prompts": true}``, ``{"prompt": NAME, "arguments": {...}}``. Three wait for an event and
print nothing: ``{"next_second": true}`` (the clock is in a later second than when the step began:
a clock read from then on differs, to the second, from one read before), ``{"until_lines": PATH,
"lines": N}`` (the file has N lines: the server's effects, say) and ``{"until_stderr": TEXT}`` (the
proxy wrote TEXT on its stderr, which this process passes on to its own), the last two for 30 s at
most. A call with ``"until": TEXT`` is asked again (each time a call of its own) until its answer
holds TEXT, for 30 s at most, and only the last answer is printed: for what the server learns in
the background, such as roots. With AGENT_ROOTS set (paths joined by ``:``) the client offers
those roots; its sampling answers with the question read back; the log messages the server sent
come last, ``{"logs": [...]}``."""

import asyncio
import json
import math
import os
import signal
import sys
import threading
import time
from pathlib import Path

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def _proxy_pid() -> int:
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (stat.parent / "cmdline").read_text()
        except OSError:
            continue
        if ppid == os.getpid() and "reckon-mcp-proxy" in cmdline:
            return int(stat.parent.name)
    raise RuntimeError("no reckon-mcp-proxy child")


async def _call(session: ClientSession, call: dict) -> dict:
    try:
        result = await session.call_tool(call["name"], call["arguments"], meta=call.get("meta"))
        return {"result": result.model_dump(mode="json", by_alias=True, exclude_none=True)}
    except Exception as exc:  # the proxy's JSON-RPC error, or its connection dropped
        return {"error": f"{type(exc).__name__}: {exc}"}


async def _call_until(session: ClientSession, call: dict) -> dict:
    give_up = asyncio.get_running_loop().time() + 30
    while True:
        answer = await _call(session, call)
        if "until" not in call or call["until"] in json.dumps(answer) or asyncio.get_running_loop().time() > give_up:
            return answer
        await asyncio.sleep(0.1)


def _dump(result) -> dict:
    return result.model_dump(mode="json", by_alias=True, exclude_none=True)


async def _protocol_step(session: ClientSession, step: dict) -> dict:
    try:
        if "list_resources" in step:
            return {"resources": _dump(await session.list_resources())}
        if "list_templates" in step:
            return {"templates": _dump(await session.list_resource_templates())}
        if "read" in step:
            return {"read": _dump(await session.read_resource(step["read"]))}
        if "list_prompts" in step:
            return {"prompts": _dump(await session.list_prompts())}
        return {"prompt": _dump(await session.get_prompt(step["prompt"], step.get("arguments")))}
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


PROTOCOL_STEPS = ("list_resources", "list_templates", "read", "list_prompts", "prompt")
WAIT_S = 30


class ProxyStderr:
    """The proxy's stderr, passed on to this process's as it comes, and kept to be waited on."""

    def __init__(self):
        read, write = os.pipe()
        self.file = os.fdopen(write, "w")
        self.text = ""
        self.changed = threading.Condition()
        self.reader = threading.Thread(target=self._pass_on, args=(os.fdopen(read),), daemon=True)
        self.reader.start()

    def _pass_on(self, pipe) -> None:
        for line in pipe:
            sys.stderr.write(line)
            sys.stderr.flush()
            with self.changed:
                self.text += line
                self.changed.notify_all()

    def wait_for(self, text: str) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: text in self.text, WAIT_S)

    def close(self) -> None:
        """Once the proxy has ended: pass on the rest (its children may still hold the pipe)."""
        self.file.close()
        self.reader.join(5)


async def _until_lines(path: str, lines: int) -> None:
    give_up = asyncio.get_running_loop().time() + WAIT_S
    while asyncio.get_running_loop().time() < give_up:
        if os.path.exists(path) and len(Path(path).read_text().splitlines()) >= lines:
            return
        await asyncio.sleep(0.01)


async def main(proxy: list[str], steps: list[dict]) -> None:
    import mcp_types

    logs = []

    async def on_log(params):
        logs.append(params.data)

    async def roots(context):
        paths = [p for p in os.environ["AGENT_ROOTS"].split(":") if p]
        return mcp_types.ListRootsResult(roots=[mcp_types.Root(uri=Path(p).as_uri()) for p in paths])

    async def sampling(context, params):
        asked = params.messages[0].content.text
        return mcp_types.CreateMessageResult(role="assistant", content=mcp_types.TextContent(type="text", text=f"the host's model read: {asked}"), model="offline")

    extra = {"list_roots_callback": roots} if os.environ.get("AGENT_ROOTS") else {}
    extra["sampling_callback"] = sampling
    params = StdioServerParameters(command=proxy[0], args=proxy[1:], env=dict(os.environ))
    stderr = ProxyStderr() if any("until_stderr" in step for step in steps) else None
    try:
        await _session(params, steps, on_log, extra, stderr)
    finally:
        if stderr is not None:
            stderr.close()
    if logs:
        print(json.dumps({"logs": logs}), flush=True)


async def _session(params, steps: list[dict], on_log, extra: dict, stderr: ProxyStderr | None) -> None:
    async with stdio_client(params, **({"errlog": stderr.file} if stderr else {})) as (read, write), ClientSession(read, write, logging_callback=on_log, **extra) as session:
        await session.initialize()
        tools = await session.list_tools()
        print(json.dumps({"tools": sorted(t.name for t in tools.tools)}), flush=True)
        spawned = []
        for step in steps:
            if "spawn" in step:
                spawned.append(asyncio.ensure_future(_call(session, step["spawn"])))
            elif "join" in step:
                for answer in await asyncio.gather(*spawned):
                    print(json.dumps(answer), flush=True)
                spawned = []
            elif "sleep" in step:
                await asyncio.sleep(step["sleep"])
            elif "next_second" in step:
                now = time.time()
                while time.time() < math.floor(now) + 1:
                    await asyncio.sleep(math.floor(now) + 1 - time.time())
            elif any(k in step for k in PROTOCOL_STEPS):
                print(json.dumps(await _protocol_step(session, step)), flush=True)
            elif "write" in step:
                Path(step["write"]).write_text(step["text"])
            elif "sigterm_proxy" in step:
                os.kill(_proxy_pid(), signal.SIGTERM)
            elif "until_lines" in step:
                await _until_lines(step["until_lines"], step["lines"])
            elif "until_stderr" in step:
                await asyncio.to_thread(stderr.wait_for, step["until_stderr"])
            else:
                print(json.dumps(await _call_until(session, step)), flush=True)


if __name__ == "__main__":
    sep = sys.argv.index("--calls")
    asyncio.run(main(sys.argv[1:sep], json.loads(sys.argv[sep + 1])))
