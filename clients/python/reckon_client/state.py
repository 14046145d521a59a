"""What the client knows of a run: the server's folded state when the run was opened, plus the
events this client appended since, paired as the server pairs them (``identity.completion_pair``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from reckon_client.identity import KEY_SECRET_FIELD, completion_pair


@dataclass
class OpenCall:
    """A tool call that started and has no completion (yet)."""

    call_id: str
    name: str
    arguments: Any
    idempotency_key: str
    start_seq: int


def open_start(state: Any, key: str) -> Any:
    """The earliest start of ``key`` that ``state`` (a ``RunState``, or the server's own state)
    holds open, or None. Reads a copy of the open calls: another thread may be appending."""
    return next((c for c in list(state.open_calls.values()) if c.idempotency_key == key), None)


@dataclass
class RunState:
    """What ``invoke`` needs of a run. ``document`` is the full state Reckon returned on open
    (messages, trajectory, memory...)."""

    run_id: str
    last_seq: int = 0
    status: str = "empty"
    key_secret: str | None = None
    completed_calls: dict[str, Any] = field(default_factory=dict)
    open_calls: dict[int, OpenCall] = field(default_factory=dict)  # by start seq, in log order
    document: dict = field(default_factory=dict)
    # Completed reads the server found older than their tool's fresh_for when the run was opened:
    # ``{idempotency_key, name, call_id, seq, completed_at, fresh_for_s}`` each.
    stale_observations: list[dict] = field(default_factory=list)

    @classmethod
    def from_document(cls, run_id: str, doc: dict | None) -> RunState:
        if not doc:
            return cls(run_id)
        calls = {}
        for c in doc.get("uncertain_calls") or []:
            calls[c["start_seq"]] = OpenCall(c["call_id"], c.get("name", ""), c.get("arguments"), c["idempotency_key"], c["start_seq"])
        return cls(
            run_id,
            last_seq=doc["last_seq"],
            status=doc.get("status", "running"),
            key_secret=doc.get(KEY_SECRET_FIELD),
            completed_calls=dict(doc.get("completed_calls") or {}),
            open_calls=calls,
            document=doc,
            stale_observations=list(doc.get("stale_observations") or []),
        )

    @property
    def uncertain_calls(self) -> list[OpenCall]:
        return list(self.open_calls.values())

    def apply(self, ev: Any) -> None:
        """Fold one event this client appended (its seq is the next one)."""
        self.last_seq = ev.seq
        p = ev.payload
        if ev.type == "run_started":
            self.status = "running"
            self.key_secret = p.get(KEY_SECRET_FIELD) or self.key_secret
        elif ev.type == "run_resumed":
            self.status = "running"
        elif ev.type == "run_finished":
            self.status = "finished"
        elif ev.type == "tool_call_started":
            self.open_calls[ev.seq] = OpenCall(p["call_id"], p["name"], p.get("arguments"), p["idempotency_key"], ev.seq)
        elif ev.type == "tool_call_completed":
            start = completion_pair(self.open_calls.values(), p.get("call_id"), p.get("idempotency_key"))
            if start is not None:
                del self.open_calls[start.start_seq]
            if not p.get("is_error") and p.get("idempotency_key"):
                self.completed_calls[p["idempotency_key"]] = p.get("content")
