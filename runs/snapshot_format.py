"""The snapshot body: a ``RunState`` as JSON, exactly, and the fold version that wrote it.

Split from ``runs.snapshots`` (which reads, writes, checks and repairs snapshots) because this is
what a snapshot *means*: ``FOLD_CODE`` is a digest of this module together with the modules that
define the fold, so any change to the body format or the fold is an unknown version on load, a
cache miss, never a state the current code would not produce (docs/schema-versions.md, "Snapshots").
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import reckon_client.identity as _identity_mod

from runs import calls as _calls_mod
from runs import events as _events_mod
from runs import fold as _fold_mod
from runs import upcasters as _upcasters_mod
from runs.events import registry_check
from runs.fold import Message, OpenCall, RunState

# Bump when the meaning of a snapshot body changes: a fold rule, a RunState field, an upcaster's
# default, the body format below. Old snapshots then become cache misses instead of wrong states.
FOLD_VERSION = 3  # 2: a completion naming another open call's key completes its own start's key; 3: key_secret

BODY_FORMAT = 1


def _fold_code() -> str:
    # The source of every module whose change can change a folded state, this one included (it owns
    # the body format). Reading source is cheap and happens once per process.
    h = hashlib.sha256()
    for mod in (_events_mod, _fold_mod, _calls_mod, _identity_mod, _upcasters_mod, sys.modules[__name__]):
        try:
            h.update(Path(mod.__file__).read_bytes())
        except (OSError, TypeError):
            h.update(f"{mod.__name__}:unreadable".encode())
    return h.hexdigest()[:16]


FOLD_CODE = _fold_code()


# --- the body: RunState <-> JSON, exactly ------------------------------------------------------
#
# Every field the fold reads or writes is stored, including the ones to_dict() leaves out (tool
# calls of a message, the open calls' signatures, the raw start timestamps), because folding a tail
# onto a restored state must give exactly what folding the whole log gives. Dictionaries are stored
# as lists of pairs: a payload may use a number as a memory key or call id, and a JSON object would
# silently turn it into a string. Adding a field to RunState, Message or OpenCall without teaching it
# to this format fails at import time below, not quietly in production.

_STATE_FIELDS = (
    "run_id", "last_seq", "status", "outcome", "turns", "usage", "cost_usd", "compactions", "messages",
    "trajectory", "completed_calls", "open_calls", "pending_approvals", "memory", "resumptions", "resolutions",
    "key_secret",
)  # fmt: skip
_DICT_FIELDS = ("usage", "completed_calls", "pending_approvals", "memory", "resolutions")
_MESSAGE_FIELDS = ("role", "content", "trust", "tool_calls", "call_id", "name", "is_error")
_OPEN_CALL_FIELDS = ("call_id", "name", "arguments", "idempotency_key", "signature", "start_seq", "started_at")

registry_check(tuple(f.name for f in dataclasses.fields(RunState)) == _STATE_FIELDS, "RunState changed: teach runs/snapshot_format.py its fields")
registry_check(tuple(f.name for f in dataclasses.fields(Message)) == _MESSAGE_FIELDS, "Message changed: teach runs/snapshot_format.py its fields")
registry_check(tuple(f.name for f in dataclasses.fields(OpenCall)) == _OPEN_CALL_FIELDS, "OpenCall changed: teach runs/snapshot_format.py its fields")


def _ts_out(ts: Any) -> list:
    if isinstance(ts, datetime):
        return ["dt", ts.isoformat()]
    return ["raw", ts]


def _ts_in(tagged: list) -> Any:
    kind, value = tagged
    if kind == "dt":
        return datetime.fromisoformat(value)
    if kind == "raw":
        return value
    raise ValueError(f"unknown timestamp tag {kind!r}")


def state_to_jsonable(st: RunState) -> dict:
    """``st`` as plain JSON values, every field, dictionaries as pairs."""
    doc: dict[str, Any] = {"format": BODY_FORMAT}
    for name in _STATE_FIELDS:
        value = getattr(st, name)
        if name in _DICT_FIELDS:
            doc[name] = [[k, v] for k, v in value.items()]
        elif name == "messages":
            doc[name] = [[m.role, m.content, m.trust, m.tool_calls, m.call_id, m.name, m.is_error] for m in value]
        elif name == "open_calls":
            doc[name] = [
                [seq, c.call_id, c.name, c.arguments, c.idempotency_key, c.signature, c.start_seq, _ts_out(c.started_at)]
                for seq, c in value.items()
            ]
        else:
            doc[name] = value
    return doc


def state_from_jsonable(doc: dict) -> RunState:
    """The RunState ``state_to_jsonable`` produced ``doc`` from; ValueError if the shape is wrong."""
    if not isinstance(doc, dict) or doc.get("format") != BODY_FORMAT:
        raise ValueError(f"body format {doc.get('format') if isinstance(doc, dict) else None!r} is not {BODY_FORMAT}")
    missing = [n for n in _STATE_FIELDS if n not in doc]
    if missing:
        raise ValueError(f"body lacks {', '.join(missing)}")
    kw: dict[str, Any] = {}
    for name in _STATE_FIELDS:
        value = doc[name]
        if name in _DICT_FIELDS:
            kw[name] = {k: v for k, v in value}
        elif name == "messages":
            kw[name] = [Message(*m) for m in value]
        elif name == "open_calls":
            kw[name] = {row[0]: OpenCall(*row[1:7], _ts_in(row[7])) for row in value}
        else:
            kw[name] = value
    return RunState(**kw)


def state_dumps(st: RunState) -> str:
    return json.dumps(state_to_jsonable(st), ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def state_loads(body: str) -> RunState:
    try:
        return state_from_jsonable(json.loads(body))
    except (TypeError, ValueError, IndexError, KeyError) as exc:
        raise ValueError(f"body does not decode: {exc}") from None


def body_digest(body: str) -> str:
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


_SCALARS = frozenset({str, int, float, bool, type(None)})
_FIELD_NAMES = {cls: tuple(f.name for f in dataclasses.fields(cls)) for cls in (Message, OpenCall)}


def _identical(x: Any, y: Any) -> bool:
    """``x == y`` with every dictionary's order compared too, at every depth, and types kept apart
    (``1``, ``1.0`` and ``True`` are three values): what the body would hold for each is the same.
    Dispatched on the exact type, as most of a state is strings and numbers (a 20,000-event state
    compares in about a tenth of a second)."""
    t = type(x)
    if t is not type(y):
        return False
    if t in _SCALARS:
        return x == y
    if t is dict:
        return list(x) == list(y) and all(_identical(v, y[k]) for k, v in x.items())
    if t is list or t is tuple:
        return len(x) == len(y) and all(map(_identical, x, y))
    names = _FIELD_NAMES.get(t)
    if names is not None:
        return all(_identical(getattr(x, n), getattr(y, n)) for n in names)
    return x == y


def state_diff(a: RunState, b: RunState) -> list[str]:
    """The RunState fields in which ``a`` and ``b`` differ, in declaration order ([] when equal).

    Dictionaries compare with their order, at every depth: the fold's order (open calls in log
    order, keys in completion order) and the order of each value's own keys (a result's fields as
    the receiver sent them, a call's arguments) are part of what a resumed run sees.
    """
    return [name for name in _STATE_FIELDS if not _identical(getattr(a, name), getattr(b, name))]
