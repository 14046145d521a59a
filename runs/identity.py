"""Identity of a logical action (CONTRACTS section 2).

The signature is the tool name and its canonical arguments; the key binds it to the run. Both are
recomputed only where the log does not record them: a key recorded in the log always wins.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


def signature(name: str, arguments: Any) -> str:
    """``name:`` followed by the arguments as canonical JSON (sorted keys, no spaces, raw UTF-8)."""
    return name + ":" + json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def idempotency_key(run_id: str, sig: str) -> str:
    """The first 24 hex digits of sha256(run_id | signature)."""
    return hashlib.sha256(f"{run_id}|{sig}".encode()).hexdigest()[:24]


def call_key(run_id: str, name: str, arguments: Any) -> str:
    return idempotency_key(run_id, signature(name, arguments))
