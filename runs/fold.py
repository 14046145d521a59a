"""The fold: the only place run state is derived from events.

``fold(events)`` is a pure function of the log. It imports nothing from Django, so a replay in a
test, a command, a worker or a snapshot check is the same code. Each state-changing type has one
registered rule; each record-only type has a deliberate no-op; anything else raises. Every event's
seq must be the next one, so a gap, a repeat or a reordering is caught here too.

Compaction is applied exactly as the live run applied it: the first message, then the summary as an
untrusted user message, then the last ``kept`` messages. Replaying the full history instead would
give a resumed run a context the live run had already discarded.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable, Iterable, NamedTuple

from runs.calls import completion_key, completion_pair, start_key, start_signature
from runs.events import CURRENT_SCHEMA_VERSION, RECORD_ONLY, STATE_CHANGING, EventType, event_type, registry_check, rule_table
from runs.identity import KEY_SECRET_FIELD


class Event(NamedTuple):
    """One decoded event as the fold sees it: already upcast to the current schema.

    A named tuple rather than a frozen dataclass: as immutable, and built in well under half the
    time, which matters when a replay decodes thousands of them.
    """

    seq: int
    type: str
    payload: dict
    ts: Any = None  # datetime or RFC 3339 string, as the reader produced it
    v: int = CURRENT_SCHEMA_VERSION


@dataclass(slots=True)
class Message:
    role: str
    content: Any
    trust: str
    tool_calls: list | None = None
    call_id: str | None = None
    name: str | None = None
    is_error: bool = False


@dataclass(slots=True)
class OpenCall:
    """A tool call that started and has no matching completion (yet)."""

    call_id: str
    name: str
    arguments: Any
    idempotency_key: str
    signature: str
    start_seq: int
    started_at: Any


@dataclass(slots=True)
class RunState:
    run_id: str = ""
    last_seq: int = 0
    status: str = "empty"
    outcome: Any = None
    turns: int = 0
    usage: dict = field(default_factory=lambda: {"input_tokens": 0, "output_tokens": 0})
    cost_usd: float = 0.0
    compactions: int = 0
    messages: list[Message] = field(default_factory=list)
    trajectory: list[str] = field(default_factory=list)
    completed_calls: dict[str, Any] = field(default_factory=dict)
    open_calls: dict[int, OpenCall] = field(default_factory=dict)  # by start seq, in log order
    pending_approvals: dict[str, Any] = field(default_factory=dict)  # call_id -> question
    memory: dict[str, Any] = field(default_factory=dict)
    resumptions: int = 0
    resolutions: dict[str, str] = field(default_factory=dict)  # key -> disposition, from tool_call_resolved
    # The run's key secret from run_started (schema version 3), for keys a start did not record.
    # Never part of the replay document: only the run's own agents may see it (access.masking).
    key_secret: str | None = None

    @property
    def uncertain_calls(self) -> list[OpenCall]:
        """Starts with no matching completion, in log order."""
        return list(self.open_calls.values())

    def apply(self, ev: Event) -> None:
        """``apply(self, ev)``: the agent client folds each event it appends (reckon_client.Run)."""
        apply(self, ev)

    def to_dict(self) -> dict:
        """The replay document (docs/api.md, the state endpoint), with outcome, pending approvals and memory."""
        return {
            "run_id": self.run_id,
            "last_seq": self.last_seq,
            "status": self.status,
            "outcome": self.outcome,
            "turns": self.turns,
            "usage": dict(self.usage),
            "cost_usd": self.cost_usd,
            "compactions": self.compactions,
            "messages": [{"role": m.role, "content": m.content, "trust": m.trust} for m in self.messages],
            "trajectory": list(self.trajectory),
            "completed_calls": dict(self.completed_calls),
            "uncertain_calls": [
                {
                    "call_id": c.call_id,
                    "name": c.name,
                    "arguments": c.arguments,
                    "idempotency_key": c.idempotency_key,
                    "start_seq": c.start_seq,
                    "started_at": format_ts(c.started_at),
                }
                for c in self.open_calls.values()
            ],
            "pending_approvals": dict(self.pending_approvals),
            "memory": dict(self.memory),
            "resumptions": self.resumptions,
            "resolutions": dict(self.resolutions),
        }


class FoldError(ValueError):
    """The events cannot be folded: a seq out of order, or a version this reader does not know."""


def format_ts(ts: Any) -> str | None:
    if isinstance(ts, datetime):
        text = ts.isoformat()
        return text[:-6] + "Z" if text.endswith("+00:00") else text
    return ts


# --- the rules, one per state-changing type --------------------------------------------------
#
# A rule takes the state, the event's payload, seq and timestamp (``Rule``): the fold unpacks each
# event once, and a rule reads plain locals instead of the named tuple's attributes, which cost a
# generic attribute lookup each. No rule reads ``st.last_seq``: the fold keeps it in a local and
# stores it once at the end.

Rule = Callable[[RunState, dict, int, Any], None]

# The types whose rule reads the event's timestamp. A reader that feeds only the fold may leave
# every other event's ``ts`` out (None): no rule of another type reads it (runs.store.events_replay).
TIMESTAMPED: frozenset[str] = frozenset({EventType.TOOL_CALL_STARTED.value})


def _run_started(st: RunState, p: dict, seq: int, ts: Any) -> None:
    st.run_id = p["run_id"]
    st.status = "running"
    st.key_secret = p.get(KEY_SECRET_FIELD)


def _user_message(st: RunState, p: dict, seq: int, ts: Any) -> None:
    st.messages.append(Message("user", p["content"], "user"))


def _model_turn(st: RunState, p: dict, seq: int, ts: Any) -> None:
    # Positional arguments (role, content, trust, tool_calls, ...): a fold builds one Message per
    # turn, and keywords cost half again as much.
    st.messages.append(Message("assistant", p.get("text", ""), "model", p.get("tool_calls") or []))
    st.turns += 1
    usage = p.get("usage")
    if usage:
        total = st.usage
        for k, n in usage.items():
            total[k] = total.get(k, 0) + n
    st.cost_usd += p.get("cost_usd") or 0.0


def _tool_call_started(st: RunState, p: dict, seq: int, ts: Any) -> None:
    # A recorded signature and key are what start_signature and start_key return; they are only
    # called to compute what a writer left out.
    sig = p.get("signature") or start_signature(p)
    key = p.get("idempotency_key")
    st.open_calls[seq] = OpenCall(p["call_id"], p["name"], p["arguments"], key or start_key(st.run_id, p, sig, secret=st.key_secret), sig, seq, ts)


def _tool_call_completed(st: RunState, p: dict, seq: int, ts: Any) -> None:
    open_calls = st.open_calls
    st.messages.append(Message("tool", p["content"], "tool", None, p["call_id"], p["name"], bool(p.get("is_error", False))))
    st.trajectory.append(p.get("signature") or p["name"])
    # Pairing and the key a completion completes are runs.calls' rules, shared with the projection.
    recorded = p.get("idempotency_key")
    start = completion_pair(open_calls.values(), p["call_id"], recorded)
    if start is not None:
        del open_calls[start.start_seq]
    if recorded and (start is None or recorded == start.idempotency_key):
        key = recorded  # completion_key's answer then, without looking at the other open calls
    else:
        key, _ = completion_key(p, start, open_calls.values())
    if key:
        st.completed_calls[key] = p["content"]


def _approval_requested(st: RunState, p: dict, seq: int, ts: Any) -> None:
    st.pending_approvals[p["call_id"]] = p.get("question")
    if st.status == "running":
        st.status = "awaiting_approval"


def _approval_decided(st: RunState, p: dict, seq: int, ts: Any) -> None:
    st.pending_approvals.pop(p["call_id"], None)
    if st.status == "awaiting_approval" and not st.pending_approvals:
        st.status = "running"


def _context_compacted(st: RunState, p: dict, seq: int, ts: Any) -> None:
    keep = p.get("kept", 0)
    tail = st.messages[-keep:] if keep else []
    st.messages = st.messages[:1] + [Message("user", p.get("summary", ""), "untrusted")] + tail
    st.compactions += 1


def _memory_written(st: RunState, p: dict, seq: int, ts: Any) -> None:
    st.memory[p["key"]] = p.get("value")


def _run_finished(st: RunState, p: dict, seq: int, ts: Any) -> None:
    st.status = "finished"
    st.outcome = p["outcome"]


def _run_resumed(st: RunState, p: dict, seq: int, ts: Any) -> None:
    st.resumptions += 1
    if st.status == "paused":
        st.status = "awaiting_approval" if st.pending_approvals else "running"


def _run_paused(st: RunState, p: dict, seq: int, ts: Any) -> None:
    if st.status != "finished":
        st.status = "paused"


def _tool_call_resolved(st: RunState, p: dict, seq: int, ts: Any) -> None:
    # A resolution closes whatever start of this logical action is still open: "it did not happen"
    # and "compensated" close it without a completion, and so without occupying the key.
    key = p["idempotency_key"]
    for s in [s for s, c in st.open_calls.items() if c.idempotency_key == key]:
        del st.open_calls[s]
    st.resolutions[key] = p["disposition"]


def _record_only(st: RunState, p: dict, seq: int, ts: Any) -> None:
    """Deliberately nothing: the event is an audit fact that changes no run state."""


_RULES_BY_TYPE: dict[EventType, Rule] = {
    EventType.RUN_STARTED: _run_started,
    EventType.USER_MESSAGE: _user_message,
    EventType.MODEL_TURN: _model_turn,
    EventType.TOOL_CALL_STARTED: _tool_call_started,
    EventType.TOOL_CALL_COMPLETED: _tool_call_completed,
    EventType.APPROVAL_REQUESTED: _approval_requested,
    EventType.APPROVAL_DECIDED: _approval_decided,
    EventType.CONTEXT_COMPACTED: _context_compacted,
    EventType.MEMORY_WRITTEN: _memory_written,
    EventType.RUN_FINISHED: _run_finished,
    EventType.RUN_RESUMED: _run_resumed,
    EventType.TOOL_CALL_RESOLVED: _tool_call_resolved,
    EventType.RUN_PAUSED: _run_paused,
}
RULES: dict[str, Rule] = rule_table("fold", {**_RULES_BY_TYPE, **{t: _record_only for t in RECORD_ONLY}}, ignored=())

registry_check(
    {t.value for t in STATE_CHANGING} == {k for k, f in RULES.items() if f is not _record_only},
    "every state-changing type needs exactly one fold rule, and no record-only type may have one",
)


def _out_of_turn(seq: Any, last: int, v: Any) -> None:
    """Raise FoldError for an event that cannot follow seq ``last``: a gap, a repeat or a
    reordering, else a version newer than this reader knows."""
    if seq != last + 1:
        raise FoldError(f"event seq {seq} does not follow seq {last}")
    raise FoldError(f"event seq {seq} has schema version {v}; this reader knows up to {CURRENT_SCHEMA_VERSION}")


def apply(st: RunState, ev: Event) -> None:
    """Fold one event into ``st`` in place, after checking it is the next one."""
    seq, type_, payload, ts, v = ev
    if seq != st.last_seq + 1 or v > CURRENT_SCHEMA_VERSION:
        _out_of_turn(seq, st.last_seq, v)
    rule = RULES.get(type_)
    if rule is None:
        event_type(type_)  # raises UnknownEventType naming it
    rule(st, payload, seq, ts)  # type: ignore[misc]
    st.last_seq = seq


def fold(events: Iterable[Event], initial: RunState | None = None) -> RunState:
    """The state after ``events``, starting from an empty run or from a copy of ``initial``.

    ``events`` are Events, or plain tuples in Event's field order (``runs.store.events_replay``).
    ``apply`` written out in one loop, with the same checks in the same order and the same rules: a
    replay folds thousands of events, and a call per event, the named tuple's attribute lookups and
    ``last_seq`` stored after each event cost about a tenth of the fold's own time. A fold that
    raises returns no state, so ``last_seq`` is stored once, at the end.
    """
    st = copy.deepcopy(initial) if initial is not None else RunState()
    rules = RULES
    current = CURRENT_SCHEMA_VERSION
    last = st.last_seq
    try:
        for seq, type_, payload, ts, v in events:
            if seq != last + 1 or v > current:
                _out_of_turn(seq, last, v)
            rule = rules.get(type_)
            if rule is None:
                event_type(type_)  # raises UnknownEventType naming it
            rule(st, payload, seq, ts)  # type: ignore[misc]
            last = seq
    except BaseException:
        # A reader of the log (runs.store.events_replay) is told at once that it will not be read
        # further, rather than whenever the error's traceback, which holds this frame, is let go:
        # on PostgreSQL it holds the connection until then.
        close = getattr(events, "close", None)
        if close is not None:
            close()
        raise
    st.last_seq = last
    return st
