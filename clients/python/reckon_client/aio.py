"""The async API: the same run, with ``await`` (for async-first agent frameworks).

Requests to Reckon run in worker threads (``asyncio.to_thread``), so the event loop keeps serving
other tasks while an append is in flight; a run's appends are still one after another (the run's
lock), each at the next seq. A tool may be a coroutine function or a plain one.

    async with aio.open_run("run-q3", url=..., token=...) as run:
        result = await run.invoke(ToolCall.new("post_correction", args), post_correction)
"""

from __future__ import annotations

import asyncio
from typing import Any

from reckon_client.run import Run, RunState, ToolCall, ToolResult, current_run
from reckon_client.run import open_run as _open_run


class AsyncRun:
    """A ``Run`` with awaitable methods; ``run`` is the sync one underneath (same lease and state)."""

    def __init__(self, run: Run):
        self.run = run
        self._token = None

    @property
    def run_id(self) -> str:
        return self.run.run_id

    @property
    def state(self) -> RunState:
        return self.run.state

    @property
    def epoch(self) -> int:
        return self.run.epoch

    def key_for(self, call: ToolCall) -> str:
        return self.run.key_for(call)

    async def append(self, type: str, **payload: Any):
        return await asyncio.to_thread(self.run.append, type, **payload)

    async def invoke(self, call: ToolCall, tool: Any, *, retry_uncertain: bool = False, repeat: str | None = None) -> ToolResult:
        """``Run.invoke`` with ``await`` (``Run.ainvoke``): ``tool(arguments, idempotency_key=key)``
        may return an awaitable. Cancelling the task while the tool runs leaves the call uncertain
        (it may have taken effect), exactly as a crash would."""
        return await self.run.ainvoke(call, tool, retry_uncertain=retry_uncertain, repeat=repeat)

    def tool(self, fn=None, *, name: str | None = None, retry_uncertain: bool = False, repeat: str | None = None):
        from reckon_client.run import tool

        return tool(fn, name=name, retry_uncertain=retry_uncertain, repeat=repeat, run=self.run)

    async def close(self, *, outcome: Any = None, release: bool = True) -> None:
        await asyncio.to_thread(lambda: self.run.close(outcome=outcome, release=release))

    async def finish(self, outcome: Any = "completed") -> None:
        await self.close(outcome=outcome)

    async def __aenter__(self) -> AsyncRun:
        self._token = current_run.set(self.run)
        return self

    async def __aexit__(self, *exc: Any) -> None:
        if self._token is not None:
            current_run.reset(self._token)
            self._token = None
        if not self.run._stop.is_set():
            await self.close()


class _Opening:
    """What ``aio.open_run`` returns: await it for the run, or use it in ``async with``."""

    def __init__(self, args: tuple, kwargs: dict):
        self.args, self.kwargs = args, kwargs
        self.run: AsyncRun | None = None

    async def _open(self) -> AsyncRun:
        return AsyncRun(await asyncio.to_thread(_open_run, *self.args, **self.kwargs))

    def __await__(self):
        return self._open().__await__()

    async def __aenter__(self) -> AsyncRun:
        self.run = await self._open()
        return await self.run.__aenter__()

    async def __aexit__(self, *exc: Any) -> None:
        await self.run.__aexit__(*exc)


def open_run(run_id: str | None = None, **kwargs: Any) -> _Opening:
    """``reckon_client.open_run`` for async code: ``run = await open_run(...)`` or
    ``async with open_run(...) as run``. Same arguments."""
    return _Opening((run_id,), kwargs)
