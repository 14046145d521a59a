"""Identity of a logical action: the one part the client shares with the server.

A call's signature is its tool name and canonical arguments; its idempotency key binds the
signature to the run. Two formulas, chosen by the run:

- a run that began with a per-run key secret (every run Reckon starts since schema version 3; the
  server returns the secret only to the run's append tokens):
  ``sha256(secret | run_id | signature [| operation_id])``, first 24 hex digits;
- a run without one (older logs): ``sha256(run_id | signature)``, first 24 hex digits; an
  operation id plays no part.

A key the log recorded always wins over one computed again. The server computes the same keys; a
contract test holds the two to the recorded fixtures and to each other.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


def signature(name: str, arguments: Any) -> str:
    """``name:`` followed by the arguments as canonical JSON (sorted keys, no spaces, raw UTF-8)."""
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
