"""The rules of a tool call's identity and pairing, shared by the fold and every read model.

The fold (``runs.fold``) and the uncertain-call projection (``recovery.projection``) both decide
which start a completion closes and which logical action (idempotency key) it completed. They call
these functions rather than restating them, so the run state a resumed agent trusts and the queue a
person works from cannot disagree about a call.

- A start's key is the one recorded in the log; only a writer that recorded none gets one computed
  from the run's key secret (when its log has one), the run, the call's signature and the start's
  operation id (``reckon_client.identity``; docs/schema-versions.md states the formula).
- A completion closes the earliest open start with its call id, else the earliest with its key
  (``completion_pair``: the agent client's rule, imported from ``reckon_client.identity`` so the
  client's own state of a run pairs as the server does).
- A completion completes the key it records; one that records none (the field absent, not null)
  completes its start's key; a proven failure (``is_error`` with no key) occupies no key.
- A completion that pairs with one start by call id but records the key of another call still open
  completes its own start's key, not the one it names: that other call stays uncertain until a
  person or the receiver settles it (docs/recovery.md, "A completion that names another call's key").
"""

from __future__ import annotations

from typing import Callable, Iterable

from reckon_client.identity import Start, completion_pair, idempotency_key, signature

__all__ = ["completion_key", "completion_pair", "start_key", "start_signature"]


def start_signature(payload: dict) -> str:
    """The signature of a ``tool_call_started`` payload: recorded, else computed."""
    return payload.get("signature") or signature(payload["name"], payload["arguments"])


def start_key(run_id: str, payload: dict, sig: str | None = None, *, secret: str | Callable[[], str | None] | None = None) -> str:
    """The idempotency key of a ``tool_call_started`` payload: recorded, else computed (from
    ``sig`` when the caller has the signature already) with the run's key secret and the start's
    operation id (reckon_client.identity). ``secret`` may be a function, called only when the key
    must be computed: a reader that does not hold the run's first event looks it up only then."""
    recorded = payload.get("idempotency_key")
    if recorded:
        return recorded
    if callable(secret):
        secret = secret()
    op = payload.get("operation_id") if secret else None
    return idempotency_key(run_id, sig or start_signature(payload), secret, op if isinstance(op, str) and op else None)


def completion_key(payload: dict, start: Start | None, others: Iterable[Start]) -> tuple[str | None, str | None]:
    """(the key this completion completes or None, the key of another open call it names or None).

    ``others`` are the calls still open besides ``start``; they are read only when the recorded key
    differs from the start's, which almost never happens (so a generator costs nothing).
    """
    recorded = payload.get("idempotency_key")
    if recorded:
        if start is not None and recorded != start.idempotency_key and any(o.idempotency_key == recorded for o in others):
            return (None if payload.get("is_error") else start.idempotency_key), recorded
        return recorded, None
    if start is not None and "idempotency_key" not in payload and not payload.get("is_error"):
        return start.idempotency_key, None
    return None, None
