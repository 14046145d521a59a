"""What the client raises. Every error is a ``ReckonError``; the fence's refusals carry the run's
current epoch and last seq as the server reported them, so an agent can tell "someone else owns
this run now" from "I lost track of my own seq" without another request."""

from __future__ import annotations

from datetime import datetime


class ReckonError(Exception):
    """Anything the client raises about Reckon itself (not about a tool)."""


class ClientError(ReckonError):
    """The API refused the client itself (credentials, scope, tenant) or answered unexpectedly."""


class BadResponse(ClientError):
    """An answer the client cannot read (not JSON, not the expected shape): its status and the
    first bytes of its body, so an error page from a proxy or a crashed server is named, not parsed."""

    def __init__(self, what: str, *, status: int | None, body: bytes = b""):
        self.status, self.body = status, body[:200]
        shown = self.body.decode("utf-8", "replace")
        super().__init__(f"{what}: HTTP {status if status is not None else 'no answer'}: {shown!r}")


class ServerUnavailable(BadResponse):
    """Reckon did not answer usably (connection refused, 502/503/504, an error page) until the
    run's lease would expire: retrying longer could only be fenced."""


class WriterRefused(ClientError):
    """The server refused an event of a type agents do not write (a person's decision, claim or
    note, or one of Reckon's recovery facts): 403, the message naming the type."""


class RunNotFound(ReckonError):
    """The run does not exist, or lies outside the token's tenants (the server answers alike)."""


class InvalidEvent(ReckonError):
    """The server refused an event's content (422): the message names what and where."""


class TooLarge(InvalidEvent):
    """The server refused an append for its size (413): an event's payload over the server's
    RECKON_MAX_EVENT_BYTES, a run's payloads together over RECKON_MAX_RUN_BYTES, or the request body
    over RECKON_MAX_REQUEST_BYTES. ``limit`` (bytes) and ``setting`` name the limit (None for a body);
    ``seq`` is the first event that does not fit. Sending it again cannot succeed; a smaller batch
    may, for a body over its limit."""

    def __init__(self, message: str, *, limit: int | None = None, setting: str | None = None, seq: int | None = None):
        self.limit, self.setting, self.seq = limit, setting, seq
        super().__init__(message)


class LeaseHeld(ReckonError):
    """Another holder's lease on the run has not expired yet (the server names the holder and the
    expiry, never the epoch: ``epoch`` is 0)."""

    def __init__(self, message: str = "", *, run_id: str, holder: str, epoch: int, expires_at: datetime | None):
        self.run_id, self.holder, self.epoch, self.expires_at = run_id, holder, epoch, expires_at
        super().__init__(message or f"run {run_id} is leased by {holder!r} until {expires_at}")


class FenceError(ReckonError):
    """An append or lease call the run's fence refused."""

    def __init__(self, message: str, *, run_id: str, current_epoch: int, last_seq: int):
        self.run_id, self.current_epoch, self.last_seq = run_id, current_epoch, last_seq
        super().__init__(message)


class StaleEpoch(FenceError):
    """Someone else holds the run under a newer epoch: this writer must stop."""


class SeqConflict(FenceError):
    """The run's last seq is not the one this writer expected."""


class RunFinished(FenceError):
    """The run has ended; nothing more can be appended."""


class ToolFailed(Exception):
    """Raised by a tool that KNOWS its action did not take effect (the receiver answered 400, say).

    A proven failure frees the action's key: the call may be tried again. Anything else a tool
    raises proves nothing and leaves the call uncertain."""


class CallUncertain(ReckonError):
    """The call may or may not have taken effect; it stays open for reconciliation or a person."""

    def __init__(self, message: str, *, run_id: str, call_id: str, idempotency_key: str, start_seq: int | None):
        self.run_id, self.call_id, self.idempotency_key, self.start_seq = run_id, call_id, idempotency_key, start_seq
        super().__init__(message)
