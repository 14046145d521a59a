"""Upcasters: read an event written under an older schema version as the current version.

Each is a small pure function ``upcast_<type>_v<N>_v<N+1>(payload, run_id) -> payload`` that returns
a new dict and never changes its input. They run on read only: a stored row keeps the version it was
written with, and ``events_upcast`` applies them in a loop until the event is current
(pyeventsourcing's ``Mapper.to_domain_event``). A version newer than this reader knows is rejected
with the run, the seq and the version named; it is never folded with a guess.

Only compatible changes are upcasts: a new field with a default that means what the old writer
meant. A change of meaning (say, ``kept`` counted in turns instead of messages) would turn valid old
values into a wrong context; it needs a data migration, not an upcaster (docs/schema-versions.md).

The same defaults fill a current-version event that a writer sent without them, so every stored
version 2 or 3 event carries source, tenant and operation_id. Version 3 changed no field of an
older event: a version 2 event reads as version 3 unchanged (no upcaster), and a run whose log has
no key secret keeps the secret-less key formula (reckon_client/identity.py). What version 3 changed is only
the defaults of a new event: its operation id is the recorded key or null, never computed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable

import orjson

from runs.events import CURRENT_SCHEMA_VERSION, EventType
from runs.fold import Event
from reckon_client.identity import idempotency_key, signature

DEFAULT_TENANT = "default"


class UnsupportedVersion(ValueError):
    """An event from a schema version newer than this reader knows."""

    def __init__(self, *, run_id: str, seq: int, version: int):
        self.run_id, self.seq, self.version = run_id, seq, version
        if isinstance(version, int) and not isinstance(version, bool) and version > CURRENT_SCHEMA_VERSION:
            why = f"this reader knows up to {CURRENT_SCHEMA_VERSION}: upgrade Reckon before reading this run"
        else:
            # Not "newer": a version below 1 (or not a number) was never written by any release.
            why = f"no release of Reckon writes that version (known: 1 to {CURRENT_SCHEMA_VERSION})"
        super().__init__(f"run {run_id!r} seq {seq} has schema version {version!r}; {why}")


def tenant_of(arguments) -> str:
    """The tenant a tool call's arguments name (a non-empty string under ``tenant``), else the default."""
    if isinstance(arguments, dict) and isinstance(arguments.get("tenant"), str) and arguments["tenant"]:
        return arguments["tenant"]
    return DEFAULT_TENANT


def call_tenant_problem(payload: dict) -> str | None:
    """Why a ``tool_call_started`` payload names two tenants, or None.

    A call is filed under the event's ``tenant`` and executed with its arguments: when the arguments
    name a tenant too (the argument ``tenant``; no policy field renames it), both must be the same,
    or the call would be filed under one tenant and carried out against another.
    """
    arguments = payload.get("arguments")
    if not isinstance(arguments, dict):
        return None
    named, filed = arguments.get("tenant"), payload.get("tenant")
    if named is None or filed is None or named == filed:
        return None
    return f"the call is filed under tenant {filed!r} but its arguments name tenant {named!r}; one call belongs to one tenant"


def upcast_tool_call_started_v1_v2(payload: dict, run_id: str) -> dict:
    out = dict(payload)
    out.setdefault("tenant", tenant_of(payload.get("arguments")))
    if "operation_id" not in out:
        sig = payload.get("signature") or signature(payload["name"], payload["arguments"])
        out["operation_id"] = payload.get("idempotency_key") or idempotency_key(run_id, sig)
    return out


def _signature_arguments(text: str):
    """The arguments a signature records, or None when its text is not JSON.

    Read on every live completion, so orjson first (several times faster on these short texts),
    and json for a text orjson refuses (NaN, Infinity). Only a string tenant is read from the
    result (``tenant_of``), and the two agree on strings.
    """
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        pass
    try:
        return json.loads(text)
    except ValueError:
        return None


def upcast_tool_call_completed_v1_v2(payload: dict, run_id: str) -> dict:
    out = dict(payload)
    out.setdefault("source", "live")
    sig, name = payload.get("signature"), payload.get("name", "")
    if "tenant" not in out:
        arguments = None
        if isinstance(sig, str) and sig.startswith(name + ":"):
            arguments = _signature_arguments(sig[len(name) + 1 :])
        out["tenant"] = tenant_of(arguments)
    if "operation_id" not in out:
        # The business identity of the operation, which a proven failure has too: its recorded key is
        # null (it must not occupy the key in completed_calls), but the operation it failed to perform
        # is the one its start named, so the key is computed again from the signature exactly as the
        # start's was (docs/schema-versions.md, version 3). Without a signature there is nothing to
        # bind it to.
        key = payload.get("idempotency_key")
        if not key and isinstance(sig, str) and sig:
            key = idempotency_key(run_id, sig)
        out["operation_id"] = key or None
    return out


Upcaster = Callable[[dict, str], dict]

# (type, from_version) -> upcaster to from_version + 1. A type with no entry is unchanged by that step.
UPCASTERS: dict[tuple[str, int], Upcaster] = {
    (EventType.TOOL_CALL_STARTED.value, 1): upcast_tool_call_started_v1_v2,
    (EventType.TOOL_CALL_COMPLETED.value, 1): upcast_tool_call_completed_v1_v2,
}


def event_upcast(ev: Event, run_id: str) -> Event:
    """``ev`` read as the current version, or UnsupportedVersion."""
    v = ev.v
    if v == CURRENT_SCHEMA_VERSION:
        return ev
    if isinstance(v, bool) or not isinstance(v, int) or v > CURRENT_SCHEMA_VERSION or v < 1:
        raise UnsupportedVersion(run_id=run_id, seq=ev.seq, version=v)
    payload = ev.payload
    while v < CURRENT_SCHEMA_VERSION:
        step = UPCASTERS.get((ev.type, v))
        if step is not None:
            payload = step(payload, run_id)
        v += 1
    return Event(ev.seq, ev.type, payload, ev.ts, v)


def events_upcast(events: Iterable[Event], run_id: str) -> list[Event]:
    return [ev if ev.v == CURRENT_SCHEMA_VERSION else event_upcast(ev, run_id) for ev in events]


def complete_tool_call_started_v3(payload: dict) -> dict:
    """A version 3 start with ``tenant`` and ``operation_id`` filled where the writer left them out.

    The operation id defaults to the recorded key, or null. It is never computed here: without the
    run's key secret (which the store does not read on the append path) only the secret-less formula
    could be used, and a key anyone can recompute from masked arguments is what version 3 removes.
    """
    if "tenant" in payload and "operation_id" in payload:
        return payload
    out = dict(payload)
    out.setdefault("tenant", tenant_of(payload.get("arguments")))
    out.setdefault("operation_id", payload.get("idempotency_key") or None)
    return out


def complete_tool_call_completed_v3(payload: dict) -> dict:
    """A version 3 completion with ``source``, ``tenant`` and ``operation_id`` filled; the operation
    id defaults to the recorded key or null (a proven failure's writer gives it: the agent client
    records its start's key there)."""
    if "source" in payload and "tenant" in payload and "operation_id" in payload:
        return payload
    out = upcast_tool_call_completed_v1_v2({"operation_id": payload.get("idempotency_key") or None, **payload}, "")
    return out


def upcast_tool_call_started_v3_v4(payload: dict, run_id: str) -> dict:
    """Version 4 adds only optional fields; a version 3 start gets version 3's defaults (a writer
    may have left ``tenant`` and ``operation_id`` to the store, which fills them for the current
    version only)."""
    return complete_tool_call_started_v3(payload)


def upcast_tool_call_completed_v3_v4(payload: dict, run_id: str) -> dict:
    return complete_tool_call_completed_v3(payload)


UPCASTERS[(EventType.TOOL_CALL_STARTED.value, 3)] = upcast_tool_call_started_v3_v4
UPCASTERS[(EventType.TOOL_CALL_COMPLETED.value, 3)] = upcast_tool_call_completed_v3_v4

# The defaults of a current-version payload, by type (``payload_complete``): version 4 keeps version 3's.
CURRENT_DEFAULTS: dict[str, Callable[[dict], dict]] = {
    EventType.TOOL_CALL_STARTED.value: complete_tool_call_started_v3,
    EventType.TOOL_CALL_COMPLETED.value: complete_tool_call_completed_v3,
}


def payload_complete(type_: str, payload: dict, run_id: str) -> dict:
    """A current-version payload with the version's defaulted fields filled where a writer left them out."""
    fill = CURRENT_DEFAULTS.get(type_)
    return fill(payload) if fill is not None else payload
