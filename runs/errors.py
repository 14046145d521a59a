"""Domain errors of the event store. Each names the values that disagreed, so a log line or an API
response says exactly why a write was refused."""

from __future__ import annotations


class StoreError(Exception):
    """Base of every refusal by the event store."""


class RunNotFound(StoreError):
    def __init__(self, run_id: str):
        self.run_id = run_id
        super().__init__(f"run {run_id!r} does not exist")


class InvalidEvent(StoreError, ValueError):
    """An event that cannot be stored as given: unknown type, missing field, wrong shape."""


class WriterRefused(StoreError):
    """An event of a type its writer may not write (runs.events.WRITER): an agent writing a
    person's decision, say. Nothing was written."""

    def __init__(self, message: str, *, type_name: str):
        self.type_name = type_name
        super().__init__(message)


class FenceError(StoreError):
    """An append or renewal refused by the fence; nothing was written."""

    def __init__(self, message: str, *, run_id: str, current_epoch: int, last_seq: int):
        self.run_id = run_id
        self.current_epoch = current_epoch
        self.last_seq = last_seq
        super().__init__(message)


class StaleEpoch(FenceError):
    def __init__(self, *, run_id: str, epoch: int, current_epoch: int, last_seq: int, released: bool = False):
        self.epoch = epoch
        why = "was released" if released else f"is not the current epoch {current_epoch}"
        super().__init__(
            f"stale epoch for run {run_id!r}: epoch {epoch} {why}",
            run_id=run_id,
            current_epoch=current_epoch,
            last_seq=last_seq,
        )


class SeqConflict(FenceError):
    def __init__(self, *, run_id: str, expected_seq: int, last_seq: int, current_epoch: int):
        self.expected_seq = expected_seq
        super().__init__(
            f"wrong expected seq for run {run_id!r}: expected {expected_seq}, the run's last seq is {last_seq}",
            run_id=run_id,
            current_epoch=current_epoch,
            last_seq=last_seq,
        )


class RunFinished(FenceError):
    """The run has ended: a second end is refused, and so is the agent's own work after it."""

    def __init__(self, *, run_id: str, finished_seq: int, current_epoch: int, last_seq: int, refused: str = "a second run_finished is refused"):
        self.finished_seq = finished_seq
        super().__init__(
            f"run {run_id!r} already finished at seq {finished_seq}; {refused}",
            run_id=run_id,
            current_epoch=current_epoch,
            last_seq=last_seq,
        )


class LeaseHeld(StoreError):
    """Someone else holds the run's lease. The message names the holder and the expiry, never the
    epoch: the epoch is the holder's to write with, and an API answer shows it to nobody else."""

    def __init__(self, *, run_id: str, holder: str, epoch: int, expires_at, owner: str = ""):
        self.run_id = run_id
        self.holder = holder
        self.epoch = epoch
        self.expires_at = expires_at
        self.owner = owner  # runs.models.Run.lease_owner of the live lease
        until = f"{expires_at:%Y-%m-%dT%H:%M:%S.%fZ}" if expires_at is not None else "it is released"
        super().__init__(f"run {run_id!r} is leased to {holder!r} until {until}")


class TooLarge(InvalidEvent):
    """An append refused for its size: the payload of one event (``EventTooLarge``) or the run's
    payloads together (``RunTooLarge``) would pass a limit. ``seq`` is the first event that does not
    fit (an imported log's line), ``limit`` the limit in bytes and ``setting`` the setting that
    holds it. Nothing was written."""

    def __init__(self, message: str, *, seq: int, limit: int, setting: str):
        self.seq, self.limit, self.setting = seq, limit, setting
        super().__init__(message)

    def __reduce__(self):  # crosses the importer's pipe from its reading process intact
        return (_too_large, (type(self), str(self), self.seq, self.limit, self.setting))


def _too_large(cls, message: str, seq: int, limit: int, setting: str) -> "TooLarge":
    return cls(message, seq=seq, limit=limit, setting=setting)


class EventTooLarge(TooLarge):
    pass


class RunTooLarge(TooLarge):
    pass
