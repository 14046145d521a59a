"""Identity of a logical action (CONTRACTS section 2).

The signature is the tool name and its canonical arguments; the key binds it to the run. Both are
recomputed only where the log does not record them: a key recorded in the log always wins.

Two formulas, chosen by the run, never by the reader:

- a run whose ``run_started`` records a per-run secret (``key_secret``, schema version 3 and
  later): ``sha256(secret | run_id | signature [| operation_id])[:24]``. The secret is shown only to
  the run's own agents (access.masking), so a person who sees the masked arguments and the key
  cannot recompute the key from guesses of the masked values;
- a run without one (logs of schema versions 1 and 2, and their imports): ``sha256(run_id |
  signature)[:24]``, as those logs were written; an operation id plays no part.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from typing import Any

import orjson

# The run_started payload field that holds the run's key secret (schema version 3 and later).
KEY_SECRET_FIELD = "key_secret"
KEY_SECRET_RE = re.compile(r"^[0-9a-f]{32,128}$")
# What an export made for a person holds in place of the secret (the masking's own placeholder):
# such a log imports again as "unchanged" where the run is stored, and nowhere else.
KEY_SECRET_WITHHELD = "[masked]"


# Values whose orjson text (keys sorted) is exactly json.dumps's below: strings (orjson refuses a
# lone surrogate, which json would write), integers (orjson refuses one beyond 64 bits), true,
# false and null, and dicts (string keys only: orjson refuses others, which json turns into
# strings), lists and tuples of them. Anything else, a float above all (the two write some
# differently: 1e16 against 1e+16, NaN against null), takes json itself.
_EXACT_LEAVES = frozenset((str, int, bool, type(None)))
_SORTED = orjson.OPT_SORT_KEYS


def _json_text_same(value, depth: int = 0) -> bool:
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
    # json.dumps defines the text. It runs on every tool call, where it cost about 4 us; orjson
    # writes the same text for the values ``_json_text_same`` admits, in a tenth of that.
    if _json_text_same(arguments):
        try:
            return name + ":" + orjson.dumps(arguments, option=_SORTED).decode()
        except TypeError:  # a non-string key, a lone surrogate, an integer beyond 64 bits
            pass
    return name + ":" + json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def idempotency_key(run_id: str, sig: str, secret: str | None = None, operation_id: str | None = None) -> str:
    """The first 24 hex digits of sha256(secret | run_id | signature [| operation_id]) for a run
    with a key secret, else of sha256(run_id | signature) (the operation id then plays no part)."""
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


def key_secret_new() -> str:
    """A fresh per-run key secret: 16 random bytes as 32 lowercase hex digits."""
    return secrets.token_hex(16)


def key_secret_problem(value: object) -> str | None:
    """Why ``value`` cannot be a run's key secret, or None."""
    if isinstance(value, str) and KEY_SECRET_RE.match(value):
        return None
    return f"{KEY_SECRET_FIELD} must be 32 to 128 lowercase hex digits (16 random bytes or more)"
