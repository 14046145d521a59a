"""The agent client: open a run, hold its lease, append events, invoke tools without repeating effects.

``open_run`` is the same call for a new and a resumed run (seed 5.3): it takes the lease (waiting
for a crashed holder's lease to lapse), folds whatever the log holds, and appends ``run_started`` to
an empty log or ``run_resumed`` to a populated one. There is no ``if resuming`` in the agent's loop.

``AgentRun.invoke`` follows the seed's ``_invoke_one`` (5.5):

1. the key is computed from the run's key secret, the run and the call's canonical signature (and
   its operation id, when it names one), as runs.identity defines it (CONTRACTS section 2). The
   secret comes back to the agent that starts a run (the append's answer) and to one that resumes
   it (its run_started, read unmasked by an append token), so keys are the same across a resume;
2. a key the log already completed returns the stored result, without calling the tool;
3. ``tool_call_started`` is appended *before* the tool runs, so a crash from here on leaves a start
   with no completion: detectable, never silently lost;
4. the tool receives the key, to transmit to the receiver (``Idempotency-Key``);
5. the completion is appended after. A tool that raises ``ToolFailed`` proved it failed: the
   completion records ``is_error`` and a null key, so the action may be tried again. Anything else it
   raises (a timeout, a reset connection, a bug) proves nothing: the start stays open, the call is
   uncertain, and ``CallUncertain`` is raised. A timeout is never reported as a failure.

A start of the same key left open by an earlier epoch (the crashed process) is uncertain too: the
client does not call the tool again, because "again" may mean "twice". Recovery (or a person)
settles it; a tool whose receiver honours the key may opt in with ``retry_uncertain=True``.

A read whose tool's policy has ``fresh_for`` and whose completion was older than that when the run
was opened (``runs.freshness``) is not answered from the log but run again as a new operation
(``runs.identity.refresh_operation_id``), exactly as the agent client does.

This is the in-process client: ``StoreTransport`` calls ``runs.leases`` and ``runs.store`` directly
(the demo agent, the benchmarks and the tests use it inside Reckon). Agents outside Reckon use the
``reckon-client`` distribution (clients/python/, module ``reckon_client``): the same path over the
HTTP API, with no Django. Both compute keys with the formula of runs.identity; a contract test
keeps them equal.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from runs.errors import LeaseHeld, StaleEpoch
from runs.events import agent_events_check
from runs.fold import Event, RunState, apply, fold
from runs.identity import idempotency_key, refresh_operation_id, signature
from runs.run_ids import run_id_check
from runs.upcasters import tenant_of

log = logging.getLogger("reckon.client")


# --- what a transport does -------------------------------------------------------------------


@dataclass(frozen=True)
class LeaseInfo:
    run_id: str
    epoch: int
    holder: str
    last_seq: int


class Transport(Protocol):
    def acquire(self, run_id: str, holder: str, ttl: float, tenant: str | None) -> LeaseInfo: ...
    def renew(self, run_id: str, epoch: int, ttl: float) -> LeaseInfo: ...
    def release(self, run_id: str, epoch: int) -> None: ...
    def append(self, run_id: str, epoch: int, expected_seq: int, events: list[dict]) -> list[Event]: ...
    def events(self, run_id: str) -> list[Event]: ...


class StoreTransport:
    """In-process: the store and leases directly (the caller has set up Django)."""

    def acquire(self, run_id, holder, ttl, tenant):
        from runs.leases import lease_acquire

        lease = lease_acquire(run_id=run_id, holder=holder, ttl_seconds=ttl)
        if tenant:
            from runs.tenants import run_tenant_claim

            run_tenant_claim(run_id=run_id, tenant=tenant)
        return LeaseInfo(run_id, lease.epoch, lease.holder, lease.last_seq)

    def renew(self, run_id, epoch, ttl):
        from runs.leases import lease_renew

        lease = lease_renew(run_id=run_id, epoch=epoch, ttl_seconds=ttl)
        return LeaseInfo(run_id, lease.epoch, lease.holder, lease.last_seq)

    def release(self, run_id, epoch):
        from runs.leases import lease_release

        lease_release(run_id=run_id, epoch=epoch)

    _store = None  # (NewEvent, events_append): imported at the first append, once Django is set up

    def append(self, run_id, epoch, expected_seq, events):
        # Not an import per append: it cost a few microseconds between two commits, on every one.
        if StoreTransport._store is None:
            from runs.store import NewEvent, events_append

            StoreTransport._store = (NewEvent, events_append)
        new_event, events_append = StoreTransport._store
        return events_append(run_id=run_id, epoch=epoch, expected_seq=expected_seq, events=[new_event(e["type"], e["payload"]) for e in events])

    def events(self, run_id):
        from runs.store import events_load

        return events_load(run_id=run_id)

    def stale_observations(self, run_id, state):
        # The same list the HTTP API's state carries: completed reads older than their fresh_for.
        from runs.freshness import stale_observations

        return stale_observations(run_id=run_id, state=state)

    def state(self, run_id):
        # Resuming folds from the current snapshot plus its tail; any snapshot miss falls back to
        # the full replay, so the state is the same either way, only cheaper for a long run.
        from runs.snapshots import run_state_fast

        return run_state_fast(run_id)

    def close_thread(self):
        from django.db import connection

        connection.close()


# --- tools and results -----------------------------------------------------------------------


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: Any
    # Names an intentional repeat of the same arguments as its own action (schema version 3 runs):
    # part of the key, recorded as the start's operation_id. None: the arguments are the action.
    operation_id: str | None = None

    def signature(self) -> str:
        return signature(self.name, self.arguments)


@dataclass(frozen=True)
class ToolResult:
    call_id: str
    name: str
    content: Any
    is_error: bool = False
    replayed: bool = False  # the stored result of a key the log had already completed


class ToolFailed(Exception):
    """Raised by a tool that KNOWS its action did not take effect (e.g. the receiver said 400)."""


class CallUncertain(Exception):
    """The call may or may not have taken effect; it stays open for reconciliation or a person."""

    def __init__(self, message: str, *, run_id: str, call_id: str, idempotency_key: str, start_seq: int | None):
        self.run_id, self.call_id, self.idempotency_key, self.start_seq = run_id, call_id, idempotency_key, start_seq
        super().__init__(message)


Tool = Callable[..., Any]  # tool(arguments, *, idempotency_key) -> content


def _completion_tenant(arguments: Any) -> str | None:
    """The tenant the store would record on a completion that names none (``runs.upcasters``: the
    one its signature's arguments name, else ``default``), when that is certain from the arguments
    themselves: a plain dict whose ``tenant`` is a string or absent reads back from the signature
    as the same. None leaves it to the store, which reads the signature back."""
    if type(arguments) is dict and type(arguments.get("tenant")) in (str, type(None)):
        return tenant_of(arguments)
    return None


# --- a run held by this process --------------------------------------------------------------


@dataclass
class AgentRun:
    run_id: str
    transport: Any
    epoch: int
    holder: str
    ttl: float
    state: RunState
    tenant: str | None = None
    # Keys of completed reads found stale when the run was opened -> the seq of that completion.
    stale: dict[str, int] = field(default_factory=dict)
    lease_lost: threading.Event = field(default_factory=threading.Event)
    _stop: threading.Event = field(default_factory=threading.Event)
    _renewer: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # appending ---------------------------------------------------------------------------------

    def append_many(self, events: list[tuple[str, dict]]) -> list[Event]:
        """Append events at the next seqs under this run's epoch and fold them into ``state``."""
        return self._append_docs([{"type": t, "payload": p} for t, p in events])

    def _append_docs(self, docs: list[dict]) -> list[Event]:
        # An agent writes agent facts only (runs.events.WRITER): the HTTP API refuses the rest with
        # 403, and this client, which writes to the store directly, by the same table.
        agent_events_check((d["type"], d["payload"]) for d in docs)
        with self._lock:
            appended = self.transport.append(self.run_id, self.epoch, self.state.last_seq, docs)
            for ev in appended:
                apply(self.state, ev)
            return appended

    def append(self, type: str, **payload) -> Event:
        return self._append_one(type, payload)

    def _append_one(self, type_: str, payload: dict) -> Event:
        """``append`` of an event whose payload is built already (a tool call's start and its
        completion): the same append, without packing it into a batch and out again."""
        return self._append_docs([{"type": type_, "payload": payload}])[0]

    # invoking ----------------------------------------------------------------------------------

    def key_for(self, call: ToolCall, sig: str | None = None) -> str:
        """The call's idempotency key: from the run's key secret (given to this run's agents when it
        started, and read back from its log on resume), the run, the signature and the operation id;
        for a run whose log has no secret (an older version), from the run and the signature only."""
        if call.operation_id is not None and not isinstance(call.operation_id, str):
            raise TypeError(f"operation_id must be a string, got {type(call.operation_id).__name__}")
        return idempotency_key(self.run_id, sig or call.signature(), self.state.key_secret, call.operation_id)

    def invoke(self, call: ToolCall, tool: Tool, *, retry_uncertain: bool = False) -> ToolResult:
        """Run ``tool`` for ``call`` at most once per logical action (see the module docstring)."""
        sig = call.signature()
        key = self.key_for(call, sig)
        refreshes = None
        while key in self.stale:
            # A read whose result was too old when the run was opened is done again, as a new
            # operation whose identity derives from the stale completion (runs.freshness).
            refreshes = {"idempotency_key": key, "seq": self.stale[key]}
            call = replace(call, operation_id=refresh_operation_id(call.operation_id, self.stale[key]))
            key = self.key_for(call, sig)
        if key in self.state.completed_calls:
            # Replayed after a crash, or the model asked twice: the effect already happened, and
            # returning the stored result is the only safe answer.
            return ToolResult(call.id, call.name, self.state.completed_calls[key], replayed=True)
        earlier = next((c for c in self.state.open_calls.values() if c.idempotency_key == key), None)
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
            start_seq, call = earlier.start_seq, ToolCall(earlier.call_id, call.name, call.arguments, call.operation_id)
        else:
            # The tenant and the operation id are the values the store would fill in for a start
            # that leaves them out (``runs.upcasters``): given here, the store has no copy to make.
            payload = {
                "call_id": call.id,
                "name": call.name,
                "arguments": call.arguments,
                "idempotency_key": key,
                "signature": sig,
                "operation_id": call.operation_id if call.operation_id is not None else key,
                "tenant": self.tenant or tenant_of(call.arguments),
            }
            if refreshes is not None:
                payload["refreshes"] = refreshes
            start_seq = self._append_one("tool_call_started", payload).seq
        try:
            content = tool(call.arguments, idempotency_key=key)
        except ToolFailed as exc:
            # A proven failure occupies no key, but names the operation it failed to perform.
            op = call.operation_id if call.operation_id is not None else key
            self.append("tool_call_completed", call_id=call.id, name=call.name, content=str(exc), is_error=True, idempotency_key=None, signature=sig, source="live", operation_id=op)
            return ToolResult(call.id, call.name, str(exc), is_error=True)
        except Exception as exc:
            # Not a proof of failure: a timeout or a reset after the receiver accepted the request
            # looks exactly like this. Leave the start open; it is uncertain from now on.
            log.warning("tool call uncertain", extra={"run_id": self.run_id, "key": key, "epoch": self.epoch, "reason": repr(exc)})
            raise CallUncertain(
                f"{call.name} with key {key} raised {type(exc).__name__}: {exc}; its effect is unknown",
                run_id=self.run_id,
                call_id=call.id,
                idempotency_key=key,
                start_seq=start_seq,
            ) from exc
        done = {"call_id": call.id, "name": call.name, "content": content, "is_error": False, "idempotency_key": key, "signature": sig, "source": "live", "operation_id": key}
        # As the store would fill it in, without reading the signature back when that is certain.
        tenant = _completion_tenant(call.arguments)
        if tenant is not None:
            done["tenant"] = tenant
        self._append_one("tool_call_completed", done)
        return ToolResult(call.id, call.name, content)

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

    def __enter__(self) -> AgentRun:
        return self

    def __exit__(self, *exc) -> None:
        if not self._stop.is_set():
            self.close()


def new_run_id() -> str:
    return f"run-{uuid.uuid4().hex[:12]}"


def default_holder() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def open_run(
    run_id: str | None = None,
    *,
    transport: Any,
    holder: str | None = None,
    ttl: float = 30.0,
    tenant: str | None = None,
    wait: float | None = None,
    renew: bool = True,
) -> AgentRun:
    """Open a run for writing: the same call for a new run and for resuming one (seed 5.3).

    Takes the run's lease, waiting up to ``wait`` seconds (default: one lease length and a bit)
    for a crashed holder's lease to lapse; folds the log; appends ``run_started`` when the log is
    empty and ``run_resumed`` otherwise; then keeps the lease renewed from a background thread.
    """
    rid = run_id or new_run_id()
    run_id_check(rid)  # refused here, before any request, with the rule stated (runs.run_ids)
    holder = holder or default_holder()
    deadline = time.monotonic() + (wait if wait is not None else ttl * 1.5 + 1)
    while True:
        try:
            lease = transport.acquire(rid, holder, ttl, tenant)
            break
        except LeaseHeld:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.1)
    # A transport that can fold on the server side does (the store: snapshot plus tail); otherwise
    # the client folds the whole log itself. An empty log gives the empty state either way.
    state = transport.state(rid) if hasattr(transport, "state") else fold(transport.events(rid))
    stale = transport.stale_observations(rid, state) if hasattr(transport, "stale_observations") and state.last_seq else []
    run = AgentRun(rid, transport, lease.epoch, holder, ttl, state, tenant=tenant, stale={o["idempotency_key"]: o["seq"] for o in stale})
    if state.last_seq == 0:
        run.append("run_started", run_id=rid, **({"tenant": tenant} if tenant else {}))
    elif state.status != "finished":  # a finished run has nothing to resume; the caller sees its state
        run.append("run_resumed", epoch=lease.epoch, holder=holder, after_seq=state.last_seq, **({"stale_observations": stale} if stale else {}))
    if renew:
        run._start_renewing()
    return run
