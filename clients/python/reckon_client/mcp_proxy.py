"""``reckon-mcp-proxy``: put Reckon between an agent and a real MCP server, with no change to either.

    reckon-mcp-proxy --url http://127.0.0.1:8000 --token TOKEN [--run-id RUN_ID] -- COMMAND [ARGS...]

The proxy speaks MCP over stdio to the agent, starts ``COMMAND ARGS`` as the real MCP server (over
stdio too) and offers its tools unchanged. Every ``tools/call`` goes through the client's invoke
path in the run: its start is recorded before the call is forwarded, the key travels to the server
in ``params._meta["io.reckon/idempotency-key"]``, and the completion is recorded after.

Refused before anything is recorded, as a JSON-RPC error: a tool the server does not list, arguments
its ``inputSchema`` rejects, and a call that arrives while the proxy shuts down (after SIGTERM).

Repeats (docs/agents.md, "Intentional repeats"): a call asked again in this session after the same
call completed, or while it still runs, is a new operation and reaches the server; a call this
session has not made yet whose key the run completed (a session resumed after a crash, asking
again) is answered from the log when the tool's ``repeat`` is ``"same"`` and runs again when
``"new"``. ``repeat`` comes from ``--policies FILE`` (the policy TOML), else from the annotations:
read-only and idempotent tools ``"new"``, the rest ``"same"``. A host may name the operation itself in
``params._meta["io.reckon/operation-id"]``: the same id sent twice at once is one action, the
second answered once the first ends.

What counts as what: a result with ``isError: true`` is a proven failure (recorded, the key is
free again); a JSON-RPC error, a timeout or a dropped connection proves nothing, so the call is left
uncertain in Reckon, and the agent gets a JSON-RPC error saying so (code -32001, with the key).

Starts and stops: without ``--run-id`` each session records into a run of its own
(``--run-prefix``-<UTC time>-<random>), named on stderr, and a clean disconnect (the host closes
stdin) appends ``run_finished``; a ``--run-id`` run spans sessions, so a disconnect only releases its
lease. SIGTERM refuses new calls, lets the running ones end, and releases the lease.

``--print-policies`` prints a starting tool policy file (TOML) from the server's tool annotations
(``readOnlyHint``, ``idempotentHint``, ``destructiveHint``) and exits: a person completes it with
lookups before relying on reconciliation. Options may also come from ``RECKON_URL``,
``RECKON_TOKEN`` and ``RECKON_RUN_ID``. Needs the ``mcp`` extra: ``pip install reckon-client[mcp]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import tempfile
import time
import tomllib
import uuid
from contextlib import AsyncExitStack
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from reckon_client.mcp_relay import Relay

KEY_META = "io.reckon/idempotency-key"
OPERATION_META = "io.reckon/operation-id"
UNCERTAIN_CODE = -32001  # a server-defined JSON-RPC error: the call may or may not have taken effect
SHUTTING_DOWN_CODE = -32002  # the proxy is stopping: the call was not recorded and did not run
INVALID_PARAMS = -32602  # JSON-RPC's own: an unknown tool, arguments the input schema rejects


def _mcp():
    try:
        import mcp_types
        from mcp import ClientSession, StdioServerParameters
        from mcp.client.stdio import stdio_client
        from mcp.server.lowlevel import Server
        from mcp.server.stdio import stdio_server
        from mcp.shared.exceptions import MCPError
    except ImportError:
        raise SystemExit("reckon-mcp-proxy: the MCP SDK is not installed; pip install 'reckon-client[mcp]'") from None
    return mcp_types, ClientSession, StdioServerParameters, stdio_client, Server, stdio_server, MCPError


# --- policies from annotations ---------------------------------------------------------------


def risk_class_of(annotations: Any) -> str:
    """MCP's hints as a risk class. Their defaults (a tool that says nothing) are the spec's:
    not read-only, destructive, not idempotent; so an unannotated tool is irreversible."""
    a = annotations
    if a is not None and a.read_only_hint:
        return "read_only"
    if a is not None and a.idempotent_hint:
        return "idempotent"
    if a is not None and a.destructive_hint is False:
        return "reversible"
    return "irreversible"


# A strategy that is safe before anyone has written a lookup or an execute hook: with neither, an
# uncertain read-only call is resolved as not happened (the agent reads again) and every other call
# goes to a person (recovery's rules; provider_idempotency retries only through an execute hook).
_STRATEGY = {"read_only": "reconcile_then_retry", "idempotent": "provider_idempotency", "reversible": "escalate", "irreversible": "escalate"}
# Asked again with no way to tell a replay from a repeat: tools whose second run repeats no effect
# run again; the others are answered from the log.
_REPEAT = {"read_only": "new", "idempotent": "new", "reversible": "same", "irreversible": "same"}


def _toml_str(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)  # a JSON string is a valid TOML basic string


def policies_toml(tools: list) -> str:
    """Policy TOML (Reckon's docs/recovery.md) for ``tools`` (MCP Tool objects), from their annotations."""
    out = [
        "# Tool policies generated by reckon-mcp-proxy --print-policies from the MCP server's annotations.",
        "# Annotations are hints: check each risk class, name the semantic fields, and add a lookup",
        "# (and an execute hook) before relying on reconciliation. Until then an uncertain read-only",
        "# call is resolved as not happened (the agent reads again) and every other one goes to a person.",
        "# repeat (read by reckon-mcp-proxy --policies): \"new\" runs a call asked again after a resume;",
        "# \"same\" answers it from the log.",
    ]
    for t in sorted(tools, key=lambda t: t.name):
        risk = risk_class_of(t.annotations)
        fields = sorted((t.input_schema or {}).get("properties", {}) or {})
        out += ["", f"[tools.{_toml_str(t.name)}]"]
        if t.description:
            out.append("# " + " ".join(t.description.split())[:160])
        out += [
            f"risk_class      = {_toml_str(risk)}",
            f"strategy        = {_toml_str(_STRATEGY[risk])}",
            f"repeat          = {_toml_str(_REPEAT[risk])}",
            f"semantic_fields = [{', '.join(_toml_str(f) for f in fields)}]",
            'deadline        = "15m"',
            '# lookup = { adapter = "http", url = "http://.../operations/{idempotency_key}", timeout = "2s" }',
        ]
    return "\n".join(out) + "\n"


def repeat_policies(path: str | None) -> dict[str, str]:
    """``repeat`` of each tool in the policy file at ``path`` (the rest of the file is Reckon's)."""
    if not path:
        return {}
    try:
        doc = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SystemExit(f"reckon-mcp-proxy: --policies {path}: {exc}") from None
    out = {}
    for name, table in (doc.get("tools") or {}).items():
        value = table.get("repeat") if isinstance(table, dict) else None
        if value is not None and value not in ("new", "same"):
            raise SystemExit(f"reckon-mcp-proxy: --policies {path}: tool {name!r}: repeat {value!r} is not \"new\" or \"same\"")
        if value:
            out[name] = value
    return out


# --- what the proxy knows of the server's tools ----------------------------------------------


class Tools:
    """The server's tools: the list offered to the agent, each one's input-schema validator and
    its repeat policy. ``refusal`` is the reason a call cannot run, before anything is recorded."""

    def __init__(self, tools: list, repeats: dict[str, str]):
        from jsonschema import SchemaError, validators

        self.listed = tools
        self.by_name = {t.name: t for t in tools}
        self.repeats = repeats
        self.validators = {}
        for t in tools:
            schema = t.input_schema or {}
            cls = validators.validator_for(schema)
            try:
                cls.check_schema(schema)
            except SchemaError as exc:  # the server's own mistake: its calls go unchecked
                print(f"reckon-mcp-proxy: tool {t.name!r} has an invalid inputSchema ({exc.message}); its arguments are not checked", file=sys.stderr)
                continue
            self.validators[t.name] = cls(schema)

    def refusal(self, name: str, arguments: Any) -> str | None:
        from jsonschema.exceptions import best_match

        if name not in self.by_name:
            return f"unknown tool {name!r}: this server's tools are {', '.join(sorted(self.by_name)) or 'none'}; nothing was recorded"
        validator = self.validators.get(name)
        error = best_match(validator.iter_errors(arguments)) if validator else None
        if error is not None:
            return f"arguments of {name!r} do not match its inputSchema at {error.json_path}: {error.message}; nothing was recorded"
        return None

    def risk(self, name: str) -> str:
        return risk_class_of(self.by_name[name].annotations)

    def repeat(self, name: str) -> str:
        return self.repeats.get(name) or _REPEAT[self.risk(name)]


# --- the proxy -------------------------------------------------------------------------------


def mcp_types_paginated(cursor: str):
    import mcp_types

    return mcp_types.PaginatedRequestParams(cursor=cursor)


async def _list_all_tools(session) -> list:
    tools, cursor = [], None
    while True:
        page = await session.list_tools(params=mcp_types_paginated(cursor)) if cursor else await session.list_tools()
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return tools


def session_run_id(prefix: str) -> str:
    """A run of its own for one host session: the prefix, the UTC time it began, a random tail."""
    return f"{prefix}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{uuid.uuid4().hex[:6]}"


def _say(text: str) -> None:
    print(f"reckon-mcp-proxy: {text}", file=sys.stderr, flush=True)


def _lease_wait_notice(exc: Any, seconds_left: float) -> None:
    from reckon_client.run import holder_gone

    left = seconds_left
    if exc.expires_at is not None:
        left = max(0.0, (exc.expires_at - datetime.now(timezone.utc)).total_seconds())
    who = f"{exc.holder!r}, a process that no longer runs" if holder_gone(exc.holder) else repr(exc.holder)
    _say(f"run {exc.run_id} is leased by {who}; waiting {left:.0f} s for its lease to lapse")


class ServerStartFailed(Exception):
    pass


async def _start_upstream(stack: AsyncExitStack, opts: argparse.Namespace, status: Path, relay: Relay):
    """The real server, started through ``reckon_client.mcp_launch`` (which writes its exit status
    to ``status``), initialized, with its tools listed; a server that ends first is named."""
    _, ClientSession, StdioServerParameters, stdio_client, _, _, _ = _mcp()
    params = StdioServerParameters(command=sys.executable, args=["-m", "reckon_client.mcp_launch", str(status), *opts.command], env=dict(os.environ))
    try:
        read, write = await stack.enter_async_context(stdio_client(params))
        upstream = await stack.enter_async_context(ClientSession(read, write, **relay.client_callbacks()))
        relay.upstream = upstream
        await upstream.initialize()
        return upstream, await _list_all_tools(upstream)
    except Exception as exc:
        for _ in range(20):  # the launcher writes the status as the server ends: give it a moment
            if status.exists() and status.read_text():
                break
            await asyncio.sleep(0.05)
        ended = status.read_text() if status.exists() else ""
        if ended:
            raise ServerStartFailed(f"the MCP server {' '.join(opts.command)!r} {ended} before it answered initialize") from None
        raise ServerStartFailed(f"the MCP server {' '.join(opts.command)!r} did not start: {type(exc).__name__}: {exc}") from exc


class ProxySession:
    """One host session: the run it records into, the tools, and the calls in flight."""

    def __init__(self, run: Any, upstream: Any, tools: Tools, opts: argparse.Namespace, relay: Relay):
        self.run, self.upstream, self.tools, self.opts, self.relay = run, upstream, tools, opts, relay
        self.closing = False
        self.inflight = 0
        self.idle = asyncio.Event()
        self.idle.set()

    async def on_list_tools(self, ctx, params):
        self.relay.seen(ctx)
        mcp_types = _mcp()[0]
        return mcp_types.ListToolsResult(tools=self.tools.listed)

    async def on_call_tool(self, ctx, params):
        mcp_types, *_, MCPError = _mcp()
        from reckon_client.errors import CallUncertain

        self.relay.seen(ctx)
        if self.closing:
            raise MCPError(SHUTTING_DOWN_CODE, f"reckon-mcp-proxy is shutting down: {params.name} was not recorded and did not run")
        arguments = params.arguments or {}
        refused = self.tools.refusal(params.name, arguments)
        if refused:
            raise MCPError(INVALID_PARAMS, refused)
        self.inflight += 1
        self.idle.clear()
        try:
            failed: dict[str, Any] = {}
            res = await self._invoke(params, arguments, failed)
        except CallUncertain as exc:
            raise MCPError(UNCERTAIN_CODE, str(exc), {"idempotency_key": exc.idempotency_key, "run_id": exc.run_id, "uncertain": True}) from None
        finally:
            self.inflight -= 1
            if not self.inflight:
                self.idle.set()
        if res.is_error:
            return failed["result"]
        return _as_result(mcp_types, res.content)

    async def _invoke(self, params, arguments: dict, failed: dict):
        from reckon_client.errors import ToolFailed
        from reckon_client.run import ToolCall

        meta = dict(params.meta) if params.meta else {}
        host_op = meta.get(OPERATION_META)
        if host_op is not None and not isinstance(host_op, str):
            raise _mcp()[-1](INVALID_PARAMS, f"_meta[{OPERATION_META!r}] must be a string; nothing was recorded")

        async def forward(arguments, *, idempotency_key):
            result = await self.upstream.call_tool(params.name, arguments, read_timeout_seconds=self.opts.timeout, meta={**meta, KEY_META: idempotency_key})
            if result.is_error:
                failed["result"] = result
                doc = result.model_dump(mode="json", by_alias=True, exclude_none=True)
                text = " ".join(c.get("text", "") for c in doc.get("content", []) if isinstance(c, dict))
                raise ToolFailed(text or json.dumps(doc))
            return result.model_dump(mode="json", by_alias=True, exclude_none=True)

        call = ToolCall.new(params.name, arguments, operation_id=host_op)
        # A host's own operation id names the action: no counting of repeats on top of it.
        repeat = None if host_op is not None else self.tools.repeat(params.name)
        return await self.run.invoke(call, forward, repeat=repeat, retry_uncertain=self.tools.risk(params.name) == "read_only")

    async def drain(self) -> None:
        """SIGTERM: refuse new calls from now on and wait for the running ones."""
        self.closing = True
        await self.idle.wait()
        # The last handler has returned; the SDK writes its answer to the host just after. Give it
        # that moment before the serving task is cancelled.
        await asyncio.sleep(0.2)


async def run_proxy(opts: argparse.Namespace) -> int:
    mcp_types, *_, stdio_server, _ = _mcp()
    from reckon_client import aio

    async with AsyncExitStack() as stack:
        status = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="reckon-mcp-"))) / "server-status"
        repeats = repeat_policies(opts.policies)  # a bad file stops the start before anything runs
        relay = Relay()
        upstream, listed = await _start_upstream(stack, opts, status, relay)
        if opts.print_policies:
            sys.stdout.write(policies_toml(listed))
            return 0
        tools = Tools(listed, repeats)
        per_session = not opts.run_id
        run_id = opts.run_id or session_run_id(opts.run_prefix)
        run = await aio.open_run(run_id, url=opts.url, token=opts.token, ttl=opts.ttl, tenant=opts.tenant, on_wait=_lease_wait_notice)
        _say(f"recording in run {run_id}" + (" (a run for this session)" if per_session else ""))
        session = ProxySession(run, upstream, tools, opts, relay)

        async def tools_changed():
            session.tools = Tools(await _list_all_tools(upstream), tools.repeats)

        relay.tools_changed = tools_changed
        caps = upstream.server_capabilities
        server = Relay.server("reckon-mcp-proxy", "0.1.0", on_list_tools=session.on_list_tools, on_call_tool=session.on_call_tool, **relay.server_handlers(caps))
        init = server.create_initialization_options(notification_options=Relay.notification_options(caps))
        try:
            async with stdio_server() as (sread, swrite):
                serving = asyncio.ensure_future(server.run(sread, swrite, init))
                stopping = asyncio.ensure_future(_on_sigterm(session))
                await asyncio.wait([serving, stopping], return_when=asyncio.FIRST_COMPLETED)
                clean = serving.done() and serving.exception() is None and not session.closing
                for task in (serving, stopping):
                    task.cancel()
                await asyncio.gather(serving, stopping, return_exceptions=True)
        except BaseException:
            await run.close()  # the lease goes, the run stays running: its calls may be uncertain
            raise
        await _end(run, clean and per_session)
    return 0


async def _on_sigterm(session: ProxySession) -> None:
    got = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, got.set)
    try:
        await got.wait()
        _say("SIGTERM: new calls are refused; waiting for the running ones")
        await session.drain()
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


async def _end(run: Any, finish: bool) -> None:
    """A clean end of a session's own run finishes it, unless a call is left uncertain; any other
    end releases the lease and leaves the run for the next session (or for recovery)."""
    open_calls = run.state.uncertain_calls
    if finish and not open_calls:
        await run.close(outcome="completed")
        _say(f"run {run.run_id} finished")
        return
    await run.close()
    if open_calls:
        _say(f"run {run.run_id} left running: {len(open_calls)} call(s) uncertain")


def _as_result(mcp_types, content: Any):
    """A stored completion as the agent's tools/call result: the server's own result when the proxy
    recorded it live, else (a completion reconciliation or a person recorded: the observed
    operation) the content as JSON text, and as structured content when it is an object."""
    if isinstance(content, dict) and isinstance(content.get("content"), list):
        try:
            return mcp_types.CallToolResult.model_validate(content)
        except ValueError:
            pass
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    return mcp_types.CallToolResult(content=[mcp_types.TextContent(type="text", text=text)], structured_content=content if isinstance(content, dict) else None)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="reckon-mcp-proxy", description="Record every MCP tools/call in a Reckon run, with its idempotency key in _meta.")
    p.add_argument("--url", default=os.environ.get("RECKON_URL"), help="Reckon's URL (or RECKON_URL)")
    p.add_argument("--token", default=os.environ.get("RECKON_TOKEN"), help="an API token with the append and read scopes (or RECKON_TOKEN)")
    p.add_argument("--run-id", default=os.environ.get("RECKON_RUN_ID"), help="one run for every session (or RECKON_RUN_ID); default: a run per session")
    p.add_argument("--run-prefix", default="mcp", help="the start of a per-session run's id (default: mcp)")
    p.add_argument("--policies", help="a tool policy file (TOML); the proxy reads each tool's repeat")
    p.add_argument("--tenant", help="the tenant a new run belongs to")
    p.add_argument("--ttl", type=float, default=None, help="lease length in seconds (or RECKON_LEASE_SECONDS, default 30)")
    p.add_argument("--timeout", type=float, default=None, help="seconds to wait for a tool's answer; past it the call is uncertain")
    p.add_argument("--print-policies", action="store_true", help="print a starting tool policy file (TOML) from the tools' annotations and exit")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]: the real MCP server")
    opts = p.parse_args(argv)
    if opts.command and opts.command[0] == "--":
        opts.command = opts.command[1:]
    if not opts.command:
        p.error("the MCP server to start is missing: -- COMMAND [ARGS...]")
    if not opts.print_policies:
        for name in ("url", "token"):
            if not getattr(opts, name):
                p.error(f"--{name} (or RECKON_{name.upper()}) is required")
    return opts


def main(argv: list[str] | None = None) -> int:
    opts = parse(argv)
    try:
        return asyncio.run(run_proxy(opts))
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # one line, never a traceback: what failed and where
        while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
            exc = exc.exceptions[0]  # the task group's wrapping says nothing; its one cause does
        print(f"reckon-mcp-proxy: {type(exc).__name__}: {exc}", file=sys.stderr)
        if os.environ.get("RECKON_DEBUG"):
            raise
        return 1


if __name__ == "__main__":
    sys.exit(main())
