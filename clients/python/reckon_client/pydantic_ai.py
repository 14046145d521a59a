"""Pydantic AI: a toolset whose every call is recorded in a Reckon run.

    from pydantic_ai import Agent
    from pydantic_ai.toolsets import FunctionToolset
    from reckon_client import aio
    from reckon_client.pydantic_ai import RecordedToolset

    agent = Agent(model, toolsets=[RecordedToolset(FunctionToolset([look_up_balance, post_correction]))])
    async with aio.open_run("run-q3-recon"):
        await agent.run("Correct account C-771")

``RecordedToolset`` wraps any toolset (functions, an MCP server, ...). Each call goes through the
run's ``invoke``: the tool's name and validated arguments are the call's identity (the model's
tool-call id is new on every turn, so it is not), a call the run already completed returns its stored
result without running the tool, a call left open by a crashed process raises ``CallUncertain``
instead of running again, and the tool reads its key with ``reckon_client.current_idempotency_key()``.

``repeat="new" | "same"`` (one value for every tool, or a mapping by tool name) applies the rule
for intentional repeats (docs/agents.md, "Intentional repeats"; ``reckon_client.repeats``), as
``@tool(repeat=...)`` does: a call the model asks again in this process after the same one
completed, or while it still runs (a turn's calls run at once), is a new operation that reaches the
tool; a call the run completed before this process asked it is answered from the log with
``"same"`` and run again with ``"new"``. Without it, the arguments are the action.

The ``pydantic-ai`` extra (``pip install 'reckon-client[pydantic-ai]'``) installs ``pydantic-ai-slim``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from pydantic_ai.toolsets import AbstractToolset, WrapperToolset

from reckon_client.aio import AsyncRun
from reckon_client.errors import ToolFailed
from reckon_client.repeats import check_repeat, repeat_of
from reckon_client.run import Run, ToolCall, current_run, json_ready

__all__ = ["RecordedToolset"]


@dataclass
class RecordedToolset(WrapperToolset):
    """``wrapped`` with every tool call recorded in ``run`` (default: the run of the enclosing
    ``open_run``/``aio.open_run`` block). A tool that raises ``ToolFailed`` is recorded as a proven
    failure and the error raised again; ``retry_uncertain=True`` lets a call left open by a crashed
    process run again with its original key (for receivers that honour it). ``repeat``: "new" or
    "same" for every tool, or a mapping by tool name (a name the toolset does not offer is refused
    when the agent lists the tools)."""

    wrapped: AbstractToolset
    run: Run | AsyncRun | None = None
    retry_uncertain: bool = field(default=False, kw_only=True)
    repeat: str | Mapping[str, str] | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        check_repeat(self.repeat)

    async def get_tools(self, ctx: Any) -> dict[str, Any]:
        tools = await self.wrapped.get_tools(ctx)
        check_repeat(self.repeat, tools)
        return tools

    def _active(self, name: str) -> AsyncRun:
        r = self.run or current_run.get()
        if r is None:
            raise RuntimeError(f"tool {name!r} was called outside a run: run the agent inside `async with aio.open_run(...)` or pass run=")
        return r if isinstance(r, AsyncRun) else AsyncRun(r)

    async def call_tool(self, name: str, tool_args: dict[str, Any], ctx: Any, tool: Any) -> Any:
        run = self._active(name)

        async def call(arguments: dict, *, idempotency_key: str) -> Any:
            return await self.wrapped.call_tool(name, tool_args, ctx, tool)

        result = await run.invoke(ToolCall.new(name, json_ready(tool_args)), call, retry_uncertain=self.retry_uncertain, repeat=repeat_of(self.repeat, name))
        if result.is_error:
            raise ToolFailed(result.content)
        return result.content
