"""Synthetic runs for benchmarks, snapshot planning and tests: the one generator of a working agent.

Each cycle of three events is a model turn that asks for a ledger read, the call's start and its
completion, each start and completion carrying the signature and idempotency key a reference
writer records. A long-running agent compacts its context now and then (``compact_every``):
without that its state, and any snapshot of it, would carry tens of thousands of messages no
model could be given.
"""

from __future__ import annotations

from reckon_client.identity import call_key, idempotency_key, signature
from runs.leases import Lease, lease_acquire
from runs.store import NewEvent, events_append


def synthetic_events(run_id: str, start_seq: int, n: int, *, compact_every: int | None = None, recorded: bool = True) -> list[NewEvent]:
    """``n`` events of a working agent, the first of them at ``start_seq``. ``recorded=False``: a
    writer that records neither signatures nor keys (the fold computes them), with the same
    arguments for every read of an account, as the snapshot figures have always been measured."""
    out: list[NewEvent] = []
    seq = start_seq
    while len(out) < n:
        i = seq // 3
        if compact_every and seq % compact_every == 0:
            out.append(NewEvent("context_compacted", {"summary": f"Summary of work up to seq {seq}: ledgers read, balances noted.", "kept": 12}))
            seq += 1
            continue
        args = {"tenant": "acme", "account": str(4000 + i % 97), "period": "2026-Q3"}
        if recorded:
            args["n"] = i
        sig = signature("read_ledger", args)
        key = idempotency_key(run_id, sig)
        ids = {"idempotency_key": key, "signature": sig} if recorded else {}
        kind = seq % 3
        if kind == 0:
            turn = {
                "text": f"Reading ledger {args['account']}.",
                "tool_calls": [{"id": f"c{i}", "name": "read_ledger", "arguments": args}],
                "usage": {"input_tokens": 900 + i % 50, "output_tokens": 60},
                "cost_usd": 0.0031,
            }
            out.append(NewEvent("model_turn", turn))
        elif kind == 1:
            out.append(NewEvent("tool_call_started", {"call_id": f"c{i}", "name": "read_ledger", "arguments": args, **ids}))
        else:
            result = {"balance": f"{1000 + i}.00", "entries": i % 300}
            done = {"call_id": f"c{i}", "name": "read_ledger", "content": result, "is_error": False, **ids}
            out.append(NewEvent("tool_call_completed", done))
        seq += 1
    return out


def calls_started(
    run_id: str,
    calls: list[tuple[str, str, dict]],
    *,
    holder: str,
    ttl_seconds: int = 30,
    keys: dict[str, str] | None = None,
    completed: int = 0,
    ts=None,
    secret: str | None = None,
) -> Lease:
    """A run that started and began ``calls`` (call id, tool, arguments) under a new lease, the
    first ``completed`` of them completed: where every crash scenario begins. Each start records
    the computed key unless ``keys`` gives the call id a recorded one. The lease stays held.

    With ``secret``, the run records it as its key secret and keys are computed with it, as the
    agent client does; without, the run records a secret the store chose and the keys are the
    secret-less formula's (recorded keys win, so the run is consistent either way)."""
    lease = lease_acquire(run_id=run_id, holder=holder, ttl_seconds=ttl_seconds)
    events = [NewEvent("run_started", {"run_id": run_id, **({"key_secret": secret} if secret else {})}, ts=ts)]
    for i, (cid, tool, args) in enumerate(calls):
        key = (keys or {}).get(cid) or call_key(run_id, tool, args, secret)
        events.append(NewEvent("tool_call_started", {"call_id": cid, "name": tool, "arguments": args, "idempotency_key": key}, ts=ts))
        if i < completed:
            events.append(NewEvent("tool_call_completed", {"call_id": cid, "name": tool, "content": "ok", "is_error": False, "idempotency_key": key}))
    events_append(run_id=run_id, epoch=lease.epoch, expected_seq=0, events=events)
    return lease
