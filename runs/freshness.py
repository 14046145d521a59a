"""Freshness of a run's observations: which completed reads are too old to be trusted on resume.

A read's result in the log is what the world looked like then. A run resumed hours later would
reason over it as if it were now, so a tool's policy may say how long its result may be trusted
(``fresh_for``, only for read-only and idempotent tools). When a run is opened, every completed call
of such a tool whose completion is older than that is a *stale observation*: the agent client does
not return it from the log but reads again, as a new operation with its own identity
(``reckon_client.identity.refresh_operation_id``), and ``run_resumed`` lists what was found stale.

The policies live in ``recovery``, above this layer; it registers where to read each tool's
``fresh_for`` (``fresh_for_register``), as it registers its projection with the store.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import Any

from runs.fold import RunState, format_ts

FreshForSource = Callable[[], Mapping[str, float]]
_source: FreshForSource | None = None


def fresh_for_register(source: FreshForSource) -> FreshForSource:
    """Where the tools' ``fresh_for`` (seconds, by tool name) are read when a run is opened."""
    global _source
    _source = source
    return source


def fresh_for_by_tool() -> Mapping[str, float]:
    return _source() if _source is not None else {}


def stale_observations(*, run_id: str, state: RunState, now: datetime | None = None, fresh_for: Mapping[str, float] | None = None) -> list[dict[str, Any]]:
    """The run's completed reads older than their tool's ``fresh_for`` at ``now``, in log order:
    ``{idempotency_key, name, call_id, seq, completed_at, fresh_for_s}`` each (the latest completion
    of each key the run holds as completed).

    Only a run with a key secret can give a read done again a key of its own (an operation id plays
    no part in the older formula), so a run without one has none.
    """
    from runs.models import Event

    fresh_for = fresh_for_by_tool() if fresh_for is None else fresh_for
    if not fresh_for or not state.key_secret or not state.completed_calls:
        return []
    now = now or datetime.now(timezone.utc)
    latest: dict[str, tuple[int, datetime, str, Any]] = {}
    rows = Event.objects.filter(run_id=run_id, type="tool_call_completed", seq__lte=state.last_seq).order_by("seq").values_list("seq", "ts", "payload")
    for seq, ts, p in rows.iterator():
        key, name = p.get("idempotency_key"), p.get("name")
        if name in fresh_for and key in state.completed_calls and not p.get("is_error"):
            latest[key] = (seq, ts, name, p.get("call_id"))
    out = []
    for key, (seq, ts, name, call_id) in latest.items():
        if (now - ts).total_seconds() > fresh_for[name]:
            out.append({"idempotency_key": key, "name": name, "call_id": call_id, "seq": seq, "completed_at": format_ts(ts), "fresh_for_s": fresh_for[name]})
    return sorted(out, key=lambda o: o["seq"])
