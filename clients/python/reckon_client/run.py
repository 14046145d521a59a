"""Open a run, hold its lease, append events, invoke tools without repeating their effects.

``open_run`` is the same call for a new and a resumed run: it takes the lease (waiting for a
crashed holder's lease to lapse), asks Reckon for the run's folded state (the client never folds
the log itself), and appends ``run_started`` to an empty run or ``run_resumed`` to one with events.
There is no ``if resuming`` in the agent's loop.

``Run.invoke`` is the recoverable path of one tool call:

1. the key is computed from the run's key secret, the run, the call's canonical signature and its
   operation id, if any (``reckon_client.identity``). The secret comes back to the agent that starts
   a run (the append's answer) and to one that resumes it (the folded state, which Reckon shows only
   to append tokens), so keys are the same across a resume;
2. a key the run already completed returns the stored result, without calling the tool;
3. ``tool_call_started`` is appended *before* the tool runs, so a crash from here on leaves a start
   with no completion: detectable, never silently lost;
4. the tool receives the key, to pass on to the receiver (``Idempotency-Key``);
5. the completion is appended after. A tool that raises ``ToolFailed`` proved it failed: the
   completion records ``is_error`` and a null key, so the action may be tried again. Anything else
   it raises (a timeout, a reset connection, a bug) proves nothing: the start stays open, the call
   is uncertain, and ``CallUncertain`` is raised. A timeout is never reported as a failure.

A start of the same key left open by an earlier process is uncertain too: the client does not call
the tool again, because "again" may mean "twice". Reconciliation (or a person) settles it; a tool
whose receiver honours the key may opt in with ``retry_uncertain=True``.

Two calls with the same key in flight at once in one process are one action asked twice: the
second waits for the first to end and is then decided by the log (``reckon_client.gate``). Calls
counted with ``repeat="new" | "same"`` never share a key that way: each ask in flight is its own
operation (``reckon_client.repeats``).

A read whose tool's policy has ``fresh_for`` and whose completion was older than that when the run
was opened (the state lists it in ``stale_observations``) is not answered from the log: it runs
again as a new operation, ``operation_id = refresh@<seq of the stale completion>``, the same in
every process that resumes the run (Reckon's docs/schema-versions.md, version 4).

This is the one agent client. A transport carries its requests (``Transport``): ``HttpTransport``
over Reckon's HTTP API, and, inside Reckon, the server's in-process transport (``runs.client``),
which calls the store directly. The run, the invoke path, the lease's renewal and the close are
written here once, for both; the server depends on this package, never the reverse.
"""

from __future__ import annotations

import contextvars
import inspect
import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable, Protocol

from reckon_client.errors import CallUncertain, LeaseHeld, StaleEpoch, ToolFailed
from reckon_client.gate import KeyGate
from reckon_client.http import Event, HttpTransport
from reckon_client.identity import idempotency_key, refresh_operation_id, repeat_operation_id, signature
from reckon_client.repeats import REPEATS, SessionRepeats
from reckon_client.state import OpenCall, RunState, open_start

__all__ = ["OpenCall", "Run", "RunState", "ToolCall", "ToolResult", "Transport", "current_idempotency_key", "new_run_id", "open_run", "tool"]

log = logging.getLogger("reckon_client")

Tool = Callable[..., Any]  # tool(arguments, *, idempotency_key) -> content

# The run a ``@tool`` function records into: set by ``with run:`` (or ``async with``).
current_run: contextvars.ContextVar[Run | None] = contextvars.ContextVar("reckon_current_run", default=None)
# The idempotency key of the call whose tool is running: a framework's tool (LangGraph, Pydantic AI)
# has no parameter for it, and reads it here to pass it on to its receiver.
current_key: contextvars.ContextVar[str | None] = contextvars.ContextVar("reckon_current_key", default=None)


def current_idempotency_key() -> str:
    """The idempotency key of the tool call running now (inside ``invoke`` or a recorded tool)."""
    key = current_key.get()
    if key is None:
        raise RuntimeError("no recorded tool call is running: current_idempotency_key() is for a tool called through Reckon")
    return key


class Transport(Protocol):
    """What a run needs of its way to Reckon. ``acquire`` raises ``LeaseHeld`` while another holder's
    lease lasts and ``renew`` raises ``StaleEpoch`` once another holds the run; ``opened`` gives the
    state ``invoke`` starts from (any object with ``RunState``'s fields and ``apply``) and the
    completed reads too old to trust (the state's ``stale_observations``). A transport may also
    have ``close_thread()``, called by the renewal thread as it ends."""

    def acquire(self, run_id: str, holder: str, ttl: float, tenant: str | None) -> Any: ...
    def renew(self, run_id: str, epoch: int, ttl: float) -> Any: ...
    def release(self, run_id: str, epoch: int) -> None: ...
    def append(self, run_id: str, epoch: int, expected_seq: int, events: list[dict]) -> list[Event]: ...
    def opened(self, run_id: str) -> tuple[Any, list[dict]]: ...


def json_ready(value: Any) -> Any:
    """``value`` as plain JSON data: a framework's validated arguments may hold pydantic models,
    and the log (and the key computed from the arguments) need what the model actually sent."""
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    if isinstance(value, dict):
        return {k: json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    return value


# --- tools and results -----------------------------------------------------------------------


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: Any
    # Names an intentional repeat of the same arguments as its own action (a monthly payment):
    # part of the key, recorded as the start's operation_id. None: the arguments are the action.
    operation_id: str | None = None

    @classmethod
    def new(cls, name: str, arguments: Any, *, operation_id: str | None = None) -> ToolCall:
        return cls(f"call-{uuid.uuid4().hex[:12]}", name, arguments, operation_id)

    def signature(self) -> str:
        return signature(self.name, self.arguments)


@dataclass(frozen=True)
class ToolResult:
    call_id: str
    name: str
    content: Any
    is_error: bool = False
    replayed: bool = False  # the stored result of a key the run had already completed
    idempotency_key: str | None = None


@dataclass(frozen=True)
class _Pending:
    """A call whose start is recorded and whose tool is about to run."""

    call: ToolCall
    key: str
    sig: str
    start_seq: int


# --- a run held by this process --------------------------------------------------------------


class Run:
    """A run this process holds the lease of. Use it as a context manager (``with``), or call
    ``finish``/``close``; ``AsyncRun`` offers the same with ``await``."""

    def __init__(self, run_id: str, transport: Transport, epoch: int, holder: str, ttl: float, state: Any, tenant: str | None = None, stale: Iterable[dict] = ()):
        self.run_id, self.transport, self.epoch, self.holder, self.ttl, self.state, self.tenant = run_id, transport, epoch, holder, ttl, state, tenant
        self.lease_lost = threading.Event()
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self._lock = threading.Lock()
        self._token: contextvars.Token | None = None
        # Keys of completed reads found stale when the run was opened -> the seq of that completion.
        self.stale = {o["idempotency_key"]: o["seq"] for o in stale}
        # The repeat indexes this session holds, for ``invoke(..., repeat=...)`` (``session_call``).
        self._repeats = SessionRepeats()
        # One call per key at a time in this process (``reckon_client.gate``).
        self._gate = KeyGate()

    def __repr__(self) -> str:
        return f"<Run {self.run_id} epoch {self.epoch} seq {self.state.last_seq}>"

    # appending ---------------------------------------------------------------------------------

    def append_many(self, events: list[tuple[str, dict]]) -> list[Event]:
        """Append events at the next seqs under this run's epoch and apply them to ``state``."""
        with self._lock:
            docs = [{"type": t, "payload": p} for t, p in events]
            appended = self.transport.append(self.run_id, self.epoch, self.state.last_seq, docs)
            for ev in appended:
                self.state.apply(ev)
            return appended

    def append(self, type: str, **payload: Any) -> Event:
        """Append one event of an agent's type (``run_started``, ``user_message``, ``model_turn``,
        ``tool_call_started``, ``tool_call_completed`` with source ``live``, ``approval_requested``,
        ``guardrail_triggered``, ``context_compacted``, ``memory_written``, ``run_resumed``,
        ``run_finished``). A person's decision, claim or note (``approval_decided``,
        ``operator_note``) and Reckon's recovery facts (``tool_call_uncertain``,
        ``reconciliation_attempted``, ``tool_call_resolved``, ``run_paused``) are not an agent's to
        write: the server refuses them with 403 naming the type (``WriterRefused``), nothing written."""
        return self.append_many([(type, payload)])[0]

    # invoking ----------------------------------------------------------------------------------

    def key_for(self, call: ToolCall, sig: str | None = None) -> str:
        """The call's idempotency key in this run (``reckon_client.identity``), from ``sig`` when
        the caller has the call's signature already."""
        if call.operation_id is not None and not isinstance(call.operation_id, str):
            raise TypeError(f"operation_id must be a string, got {type(call.operation_id).__name__}")
        return idempotency_key(self.run_id, sig or call.signature(), self.state.key_secret, call.operation_id)

    def _identify(self, call: ToolCall) -> tuple[ToolCall, str, str, dict | None]:
        """The call as it will be recorded, its key, its signature and the stale completion it
        refreshes, if any."""
        sig = call.signature()
        key = self.key_for(call, sig)
        refreshes = None
        while key in self.stale:
            # A read whose result was too old when the run was opened is done again, as a new
            # operation whose identity derives from the stale completion's seq (as on the server).
            refreshes = {"idempotency_key": key, "seq": self.stale[key]}
            call = replace(call, operation_id=refresh_operation_id(call.operation_id, self.stale[key]))
            key = self.key_for(call, sig)
        return call, key, sig, refreshes

    def _begin(self, call: ToolCall, key: str, sig: str, refreshes: dict | None, retry_uncertain: bool) -> ToolResult | _Pending:
        """Decide the call by the log (the caller holds ``key``'s gate): its stored result, or
        ``CallUncertain``, or its start recorded."""
        if key in self.state.completed_calls:
            # Replayed after a crash, or the model asked twice: the effect already happened, and
            # returning the stored result is the only safe answer.
            return ToolResult(call.id, call.name, self.state.completed_calls[key], replayed=True, idempotency_key=key)
        earlier = open_start(self.state, key)
        if earlier is not None and not retry_uncertain:
            raise CallUncertain(
                f"{call.name} with key {key} started at seq {earlier.start_seq} and never completed: it may have taken effect, so it is left for reconciliation instead of being run again",
                run_id=self.run_id,
                call_id=earlier.call_id,
                idempotency_key=key,
                start_seq=earlier.start_seq,
            )
        if earlier is not None:
            # Retrying an uncertain call with its original key: the open start already records the
            # attempt, and a second start of the same action would stay open after the completion
            # paired with the first. If this retry dies too, that one start stays uncertain.
            return _Pending(ToolCall(earlier.call_id, call.name, call.arguments, call.operation_id), key, sig, earlier.start_seq)
        payload = {"call_id": call.id, "name": call.name, "arguments": call.arguments, "idempotency_key": key, "signature": sig}
        if call.operation_id is not None:
            payload["operation_id"] = call.operation_id
        if refreshes is not None:
            payload["refreshes"] = refreshes
        if self.tenant:
            payload["tenant"] = self.tenant
        return _Pending(call, key, sig, self.append("tool_call_started", **payload).seq)

    def _done(self, p: _Pending, content: Any) -> ToolResult:
        c = p.call
        self.append("tool_call_completed", call_id=c.id, name=c.name, content=content, is_error=False, idempotency_key=p.key, signature=p.sig, source="live")
        return ToolResult(c.id, c.name, content, idempotency_key=p.key)

    def _failed(self, p: _Pending, exc: ToolFailed) -> ToolResult:
        # A proven failure occupies no key, but names the operation it failed to perform.
        c = p.call
        op = c.operation_id if c.operation_id is not None else p.key
        self.append("tool_call_completed", call_id=c.id, name=c.name, content=str(exc), is_error=True, idempotency_key=None, signature=p.sig, source="live", operation_id=op)
        return ToolResult(c.id, c.name, str(exc), is_error=True, idempotency_key=p.key)

    def _unknown(self, p: _Pending, exc: BaseException) -> CallUncertain:
        # Not a proof of failure: a timeout or a reset after the receiver accepted the request
        # looks exactly like this. Leave the start open; it is uncertain from now on.
        log.warning("tool call uncertain", extra={"run_id": self.run_id, "key": p.key, "epoch": self.epoch, "reason": repr(exc)})
        return CallUncertain(
            f"{p.call.name} with key {p.key} raised {type(exc).__name__}: {exc}; its effect is unknown",
            run_id=self.run_id,
            call_id=p.call.id,
            idempotency_key=p.key,
            start_seq=p.start_seq,
        )

    def session_call(self, call: ToolCall, repeat: str | None) -> tuple[ToolCall, Callable[[ToolResult | None], None]]:
        """``call`` with the operation id that tells an intentional repeat from a replay
        (``reckon_client.repeats``), and the function to call with its result (None: it raised).
        ``repeat`` None: the arguments are the action, no counting."""
        if repeat is None:
            return call, lambda result: None
        if repeat not in REPEATS:
            raise ValueError(f"repeat must be 'new' or 'same', got {repeat!r}")
        sig = call.signature()

        def key_at(n: int) -> str:
            return self.key_for(replace(call, operation_id=repeat_operation_id(call.operation_id, n)), sig)

        n, settled = self._repeats.take((sig, call.operation_id), repeat, key_at, self.state)
        return replace(call, operation_id=repeat_operation_id(call.operation_id, n)), lambda result: settled(result is not None and not result.is_error)

    def invoke(self, call: ToolCall, tool: Tool, *, retry_uncertain: bool = False, repeat: str | None = None) -> ToolResult:
        """Run ``tool(arguments, idempotency_key=key)`` for ``call`` at most once per logical
        action (see the module docstring); ``CallUncertain`` when its effect is unknown.
        ``repeat`` ("new" or "same") counts intentional repeats in this session (``session_call``).
        A call whose key another call of this process is running waits for it to end, then is
        decided by the log (``reckon_client.gate``)."""
        call, settled = self.session_call(call, repeat)
        result = None
        try:
            result = self._invoke(call, tool, retry_uncertain)
        finally:
            settled(result)
        return result

    def _invoke(self, call: ToolCall, tool: Tool, retry_uncertain: bool) -> ToolResult:
        call, key, sig, refreshes = self._identify(call)
        self._gate.take(key)
        try:
            begun = self._begin(call, key, sig, refreshes, retry_uncertain)
            if isinstance(begun, ToolResult):
                return begun
            token = current_key.set(begun.key)
            try:
                content = tool(call.arguments, idempotency_key=begun.key)
            except ToolFailed as exc:
                return self._failed(begun, exc)
            except Exception as exc:
                raise self._unknown(begun, exc) from exc
            finally:
                current_key.reset(token)
            return self._done(begun, content)
        finally:
            self._gate.release(key)

    async def ainvoke(self, call: ToolCall, tool: Tool, *, retry_uncertain: bool = False, repeat: str | None = None) -> ToolResult:
        """``invoke`` with ``await`` (``AsyncRun.invoke``): the appends run in worker threads and
        ``tool`` may return an awaitable. Cancelling the task while the tool runs leaves the call
        uncertain (it may have taken effect), exactly as a crash would. A task waiting for
        another call of its key holds no worker thread."""
        call, settled = self.session_call(call, repeat)
        result = None
        try:
            result = await self._ainvoke(call, tool, retry_uncertain)
        finally:
            settled(result)
        return result

    async def _ainvoke(self, call: ToolCall, tool: Tool, retry_uncertain: bool) -> ToolResult:
        import asyncio

        call, key, sig, refreshes = self._identify(call)
        await self._gate.atake(key)
        try:
            begun = await asyncio.to_thread(self._begin, call, key, sig, refreshes, retry_uncertain)
            if isinstance(begun, ToolResult):
                return begun
            token = current_key.set(begun.key)
            try:
                content = tool(call.arguments, idempotency_key=begun.key)
                if inspect.isawaitable(content):
                    content = await content
            except ToolFailed as exc:
                return await asyncio.to_thread(self._failed, begun, exc)
            except Exception as exc:
                raise self._unknown(begun, exc) from exc
            finally:
                current_key.reset(token)
            return await asyncio.to_thread(self._done, begun, content)
        finally:
            self._gate.release(key)

    def tool(self, fn: Callable | None = None, *, name: str | None = None, retry_uncertain: bool = False, repeat: str | None = None):
        """Decorate a plain function as a tool recorded in this run (see ``reckon_client.tool``)."""
        return tool(fn, name=name, retry_uncertain=retry_uncertain, repeat=repeat, run=self)

    # the lease ---------------------------------------------------------------------------------

    def _renew_loop(self) -> None:
        interval = max(0.05, self.ttl / 3)
        try:
            while not self._stop.wait(interval):
                try:
                    self.transport.renew(self.run_id, self.epoch, self.ttl)
                except StaleEpoch:
                    # Someone else owns the run now; every further append will be fenced anyway.
                    log.warning("lease lost", extra={"run_id": self.run_id, "epoch": self.epoch})
                    self.lease_lost.set()
                    return
                except Exception as exc:  # a blip: try again next interval, the fence stays the judge
                    log.warning("lease renewal failed", extra={"run_id": self.run_id, "epoch": self.epoch, "reason": repr(exc)})
        finally:
            close = getattr(self.transport, "close_thread", None)
            if close:
                close()

    def _start_renewing(self) -> None:
        self._renewer = threading.Thread(target=self._renew_loop, name=f"lease-{self.run_id}", daemon=True)
        self._renewer.start()

    def close(self, *, outcome: Any = None, release: bool = True) -> None:
        """Stop renewing; append ``run_finished`` when ``outcome`` is given; release the lease."""
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join()
        if outcome is not None:
            self.append("run_finished", outcome=outcome)
        if release:
            self.transport.release(self.run_id, self.epoch)

    def finish(self, outcome: Any = "completed") -> None:
        """End the run (``run_finished``) and release the lease."""
        self.close(outcome=outcome)

    def __enter__(self) -> Run:
        self._token = current_run.set(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._token is not None:
            current_run.reset(self._token)
            self._token = None
        if not self._stop.is_set():
            # Left by an exception (an uncertain call, say) or without finishing: release the lease
            # so a fresh process can resume at once; the run is not finished.
            self.close()


def new_run_id() -> str:
    return f"run-{uuid.uuid4().hex[:12]}"


def default_holder() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def holder_gone(holder: str) -> bool:
    """True when ``holder`` (``default_holder``'s form) names a process of this machine that no
    longer exists: its lease only waits to lapse. False when it lives or cannot be told."""
    host, _, pid = holder.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:  # alive, another user's
        return False
    return False


def _transport(url: str | None, token: str | None, transport: Any) -> Any:
    if transport is not None:
        return transport
    url = url or os.environ.get("RECKON_URL")
    token = token or os.environ.get("RECKON_TOKEN")
    if not url:
        raise ValueError("Reckon's URL is needed: url=... or RECKON_URL")
    if not token:
        raise ValueError("a Reckon API token is needed: token=... or RECKON_TOKEN")
    return HttpTransport(url, token)


def _lease_seconds(ttl: float | None) -> float:
    if ttl is not None:
        return float(ttl)
    text = os.environ.get("RECKON_LEASE_SECONDS", "30")
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise ValueError(f"RECKON_LEASE_SECONDS must be a positive number of seconds, got {text!r}")
    return value


def open_run(
    run_id: str | None = None,
    *,
    url: str | None = None,
    token: str | None = None,
    transport: Any = None,
    holder: str | None = None,
    ttl: float | None = None,
    tenant: str | None = None,
    wait: float | None = None,
    renew: bool = True,
    on_wait: Callable[[LeaseHeld, float], None] | None = None,
) -> Run:
    """Open a run for writing: the same call for a new run and for resuming one.

    ``url`` and ``token`` (or ``RECKON_URL`` and ``RECKON_TOKEN``) name the Reckon server and an
    API token with the append and read scopes. ``ttl`` is the lease length in seconds (or
    ``RECKON_LEASE_SECONDS``, default 30): how long a crashed process keeps the run. Takes the run's lease, waiting up to ``wait`` seconds
    (default: one lease length and a bit) for a crashed holder's lease to lapse; asks the server for
    the folded state; appends ``run_started`` when the run is empty and ``run_resumed`` otherwise;
    then keeps the lease renewed from a background thread. ``on_wait(exc, seconds_left)`` is
    called once when the lease is held by another (``exc.holder``), before waiting. A start that
    fails after taking the lease (the state cannot be read, say) releases it before raising, so
    the next start does not wait for it.
    """
    transport = _transport(url, token, transport)
    ttl = _lease_seconds(ttl)
    rid = run_id or os.environ.get("RECKON_RUN_ID") or new_run_id()
    holder = holder or default_holder()
    deadline = time.monotonic() + (wait if wait is not None else ttl * 1.5 + 1)
    while True:
        try:
            lease = transport.acquire(rid, holder, ttl, tenant)
            break
        except LeaseHeld as exc:
            if time.monotonic() >= deadline:
                raise
            if on_wait is not None:
                on_wait(exc, max(0.0, deadline - time.monotonic()))
                on_wait = None
            time.sleep(0.1)
    try:
        state, stale = transport.opened(rid)
        run = Run(rid, transport, lease.epoch, holder, ttl, state, tenant=tenant, stale=stale)
        if state.last_seq == 0:
            run.append("run_started", run_id=rid, **({"tenant": tenant} if tenant else {}))
        elif state.status != "finished":  # a finished run has nothing to resume; the caller sees its state
            run.append("run_resumed", epoch=lease.epoch, holder=holder, after_seq=state.last_seq, **({"stale_observations": stale} if stale else {}))
    except BaseException:
        try:
            transport.release(rid, lease.epoch)
        except Exception as exc:  # the start's own error is the one to report; this one is logged
            log.warning("lease release after a failed start failed", extra={"run_id": rid, "epoch": lease.epoch, "reason": repr(exc)})
        raise
    if renew:
        run._start_renewing()
    return run


# --- the decorator ---------------------------------------------------------------------------


def _arguments(sig: inspect.Signature, args: tuple, kwargs: dict) -> dict:
    bound = sig.bind_partial(*args, **kwargs)
    return dict(bound.arguments)


def tool(fn: Callable | None = None, *, name: str | None = None, retry_uncertain: bool = False, repeat: str | None = None, run: Run | None = None):
    """Turn a plain function into a tool whose every call is recorded in a run.

    Called with keyword (or positional) arguments, the function runs through ``invoke`` in ``run``,
    or in the run of the enclosing ``with open_run(...)`` block: a call the run already completed
    returns its stored result, an uncertain one raises ``CallUncertain``. A function with an
    ``idempotency_key`` parameter receives the call's key. A ``ToolFailed`` it raises is recorded
    as a proven failure and raised again. An ``async def`` function gives an async tool (for
    ``AsyncRun``); ``operation_id=...`` in a call gives an intentional repeat its own identity.
    ``repeat="new" | "same"`` counts repeats instead (``reckon_client.repeats``): a call made again
    in this process after the same one completed, or while it is still running, runs again as its
    own operation; None (the default) keeps one action per arguments.
    """

    def wrap(fn: Callable) -> Callable:
        tool_name = name or fn.__name__
        sig = inspect.signature(fn)
        wants_key = "idempotency_key" in sig.parameters
        params = sig.replace(parameters=[p for p in sig.parameters.values() if p.name != "idempotency_key"])

        def target(arguments: dict, key: str) -> Any:
            return fn(**arguments, idempotency_key=key) if wants_key else fn(**arguments)

        def active() -> Run:
            r = run or current_run.get()
            if r is None:
                raise RuntimeError(f"tool {tool_name!r} was called outside a run: call it inside `with open_run(...)` or decorate with run.tool")
            return r

        if inspect.iscoroutinefunction(fn):

            async def arecorded(*args: Any, operation_id: str | None = None, **kwargs: Any) -> Any:
                r = active()
                sync_run = r if isinstance(r, Run) else r.run  # an AsyncRun passed as ``run=``
                call = ToolCall.new(tool_name, _arguments(params, args, kwargs), operation_id=operation_id)
                result = await sync_run.ainvoke(call, lambda a, *, idempotency_key: target(a, idempotency_key), retry_uncertain=retry_uncertain, repeat=repeat)
                if result.is_error:
                    raise ToolFailed(result.content)
                return result.content

            arecorded.__wrapped__, arecorded.__name__, arecorded.__doc__ = fn, fn.__name__, fn.__doc__
            arecorded.tool_name = tool_name
            return arecorded

        def recorded(*args: Any, operation_id: str | None = None, **kwargs: Any) -> Any:
            call = ToolCall.new(tool_name, _arguments(params, args, kwargs), operation_id=operation_id)
            result = active().invoke(call, lambda a, *, idempotency_key: target(a, idempotency_key), retry_uncertain=retry_uncertain, repeat=repeat)
            if result.is_error:
                raise ToolFailed(result.content)
            return result.content

        recorded.__wrapped__, recorded.__name__, recorded.__doc__ = fn, fn.__name__, fn.__doc__
        recorded.tool_name = tool_name
        return recorded

    return wrap(fn) if fn is not None else wrap
