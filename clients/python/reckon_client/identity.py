"""Identity of a logical action, and which start a completion closes: the rules the client and the
server share. Reckon's server imports them from here (its fold, read models and in-process client),
so there is one copy; docs/schema-versions.md states them.

A call's signature is its tool name and canonical arguments; its idempotency key binds the
signature to the run. Two formulas, chosen by the run, never by the reader:

- a run that began with a per-run key secret (``key_secret`` in its ``run_started``: every run
  Reckon starts since schema version 3; the server returns the secret only to the run's own
  agents): ``sha256(secret | run_id | signature [| operation_id])``, first 24 hex digits, so a
  person who sees the masked arguments and the key cannot recompute the key from guesses;
- a run without one (logs of schema versions 1 and 2): ``sha256(run_id | signature)``, first 24
  hex digits; an operation id plays no part.

A key the log recorded always wins over one computed again.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Collection, Protocol, TypeVar

try:  # optional: the same text, ten times faster, where orjson is installed (Reckon's server)
    import orjson
except ImportError:  # pragma: no cover - the agent client's own environment
    orjson = None

# The run_started payload field that holds the run's key secret (schema version 3 and later).
KEY_SECRET_FIELD = "key_secret"

# Values whose orjson text (keys sorted) is exactly json.dumps's below: strings (orjson refuses a
# lone surrogate, which json would write), integers (orjson refuses one beyond 64 bits), true,
# false and null, and dicts (string keys only: orjson refuses others, which json turns into
# strings), lists and tuples of them. Anything else, a float above all (the two write some
# differently: 1e16 against 1e+16, NaN against null), takes json itself.
_EXACT_LEAVES = frozenset((str, int, bool, type(None)))


def _json_text_same(value: Any, depth: int = 0) -> bool:
    t = type(value)
    if t in _EXACT_LEAVES:
        return True
    if depth > 20:  # deep or circular: json decides (and names a circular reference)
        return False
    if t is dict:
        items = value.values()
    elif t is list or t is tuple:
        items = value
    else:
        return False
    return all(type(v) in _EXACT_LEAVES or _json_text_same(v, depth + 1) for v in items)


def signature(name: str, arguments: Any) -> str:
    """``name:`` followed by the arguments as canonical JSON (sorted keys, no spaces, raw UTF-8)."""
    # json.dumps defines the text. It runs on every tool call, where it costs about 4 us; orjson
    # writes the same text for the values ``_json_text_same`` admits, in a tenth of that.
    if orjson is not None and _json_text_same(arguments):
        try:
            return name + ":" + orjson.dumps(arguments, option=orjson.OPT_SORT_KEYS).decode()
        except TypeError:  # a non-string key, a lone surrogate, an integer beyond 64 bits
            pass
    return name + ":" + json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def idempotency_key(run_id: str, sig: str, secret: str | None = None, operation_id: str | None = None) -> str:
    """The key of the action ``sig`` in run ``run_id`` (see the module docstring for the formula)."""
    if not secret:
        return hashlib.sha256(f"{run_id}|{sig}".encode()).hexdigest()[:24]
    text = f"{secret}|{run_id}|{sig}" if operation_id is None else f"{secret}|{run_id}|{sig}|{operation_id}"
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def call_key(run_id: str, name: str, arguments: Any, secret: str | None = None, operation_id: str | None = None) -> str:
    return idempotency_key(run_id, signature(name, arguments), secret, operation_id)


def refresh_operation_id(operation_id: str | None, stale_seq: int) -> str:
    """The operation id of a read done again because the completion at ``stale_seq`` is older than
    its tool's ``fresh_for`` (schema version 4): a new operation with its own key, the same in every
    process that resumes the run, and different for each stale completion it replaces."""
    return f"refresh@{stale_seq}" if operation_id is None else f"{operation_id}|refresh@{stale_seq}"


def repeat_operation_id(operation_id: str | None, n: int) -> str | None:
    """The operation id of the ``n``-th repeat of an action within one agent session (``n`` = 0: the
    action itself): an agent that asks again after the first call completed means it again (a
    second ``git commit``, a write of A after B). Counted per session in call order, so a session
    resumed after a crash that asks the same things in the same order maps each call to the same
    key and is answered from the log (docs/agents.md, "Intentional repeats")."""
    if n == 0:
        return operation_id
    return f"repeat@{n}" if operation_id is None else f"{operation_id}|repeat@{n}"


class Start(Protocol):
    call_id: str
    idempotency_key: str


S = TypeVar("S", bound=Start)


def completion_pair(open_starts: Collection[S], call_id: Any, key: str | None) -> S | None:
    """The open start a completion closes: the earliest with its call id, else the earliest with its
    key (``open_starts`` in log order, read up to twice), or None."""
    for s in open_starts:
        if s.call_id == call_id:
            return s
    if key:
        for s in open_starts:
            if s.idempotency_key == key:
                return s
    return None
