"""LangGraph (and any LangChain tool user): tools whose every call is recorded in a Reckon run.

    from reckon_client.langgraph import recorded_tools

    tools = recorded_tools([look_up_balance, post_correction])   # LangChain BaseTools
    graph.add_node("tools", ToolNode(tools))
    with open_run("run-q3-recon") as run:
        graph.invoke({"messages": [...]})

Each wrapped tool keeps its name, description and argument schema, and its call goes through
``Run.invoke``: the arguments the model gave are the call's identity (the model's tool-call id is
not: it is new on every turn), a call the run already completed returns its stored result without
running the tool (a resumed graph replays its finished tools for free), a call left open by a
crashed process raises ``CallUncertain`` instead of running again, and the tool reads its key with
``reckon_client.current_idempotency_key()`` to pass it on to its receiver.

``repeat="new" | "same"`` (one value for every tool, or a mapping by tool name) applies the rule
for intentional repeats (docs/agents.md, "Intentional repeats"; ``reckon_client.repeats``), as
``@tool(repeat=...)`` does: a call the model asks again in this process after the same one
completed, or while it still runs (ToolNode runs a turn's calls at once), is a new operation that
reaches the tool; a call the run completed before this process asked it is answered from the log
with ``"same"`` and run again with ``"new"``. Without it, the arguments are the action.

The ``langgraph`` extra (``pip install 'reckon-client[langgraph]'``) installs LangGraph and LangChain
Core; this module needs only ``langchain_core``.
"""

from __future__ import annotations

from typing import Any, Mapping

from langchain_core.tools import BaseTool, StructuredTool

from reckon_client.aio import AsyncRun
from reckon_client.errors import ToolFailed
from reckon_client.repeats import check_repeat, repeat_of
from reckon_client.run import Run, ToolCall, current_run, json_ready

__all__ = ["recorded_tool", "recorded_tools"]


def recorded_tool(original: BaseTool, *, run: Run | None = None, retry_uncertain: bool = False, repeat: str | Mapping[str, str] | None = None) -> StructuredTool:
    """``original`` as a tool recorded in ``run`` (default: the run of the enclosing ``open_run``),
    its repeats counted when ``repeat`` is "new" or "same" (see the module docstring)."""
    check_repeat(repeat, [original.name])
    repeat = repeat_of(repeat, original.name)

    def active() -> Run:
        r = run or current_run.get()
        if isinstance(r, AsyncRun):
            r = r.run
        if r is None:
            raise RuntimeError(f"tool {original.name!r} was called outside a run: call the graph inside `with open_run(...)` or pass run=")
        return r

    def result_of(res) -> Any:
        if res.is_error:
            raise ToolFailed(res.content)
        return res.content

    def call(arguments: dict, *, idempotency_key: str) -> Any:
        return original.invoke(arguments)

    async def acall(arguments: dict, *, idempotency_key: str) -> Any:
        return await original.ainvoke(arguments)

    def func(**kwargs: Any) -> Any:
        r = active()
        return result_of(r.invoke(ToolCall.new(original.name, json_ready(kwargs)), call, retry_uncertain=retry_uncertain, repeat=repeat))

    async def coroutine(**kwargs: Any) -> Any:
        r = active()
        return result_of(await AsyncRun(r).invoke(ToolCall.new(original.name, json_ready(kwargs)), acall, retry_uncertain=retry_uncertain, repeat=repeat))

    return StructuredTool.from_function(
        func=func,
        coroutine=coroutine,
        name=original.name,
        description=original.description,
        args_schema=original.args_schema,
        infer_schema=False,
        return_direct=original.return_direct,
    )


def recorded_tools(tools: list[BaseTool], *, run: Run | None = None, retry_uncertain: bool = False, repeat: str | Mapping[str, str] | None = None) -> list[StructuredTool]:
    """Every tool of ``tools`` recorded (``recorded_tool``), in the same order. ``repeat``: one
    value for every tool, or a mapping by tool name (a name not among ``tools`` is refused)."""
    check_repeat(repeat, [t.name for t in tools])
    return [recorded_tool(t, run=run, retry_uncertain=retry_uncertain, repeat=repeat_of(repeat, t.name)) for t in tools]
