"""Ownership of a run while recovery writes to it: the lease, buffered appends, group commit.

Every write that touches a run's history goes through ``_Owner``: it takes the run's lease with a
new epoch, appends with that epoch and releases it. Two recovery workers, or a worker and a resuming
agent, therefore never both act on a run: the second cannot take a live lease (``LeaseHeld``), and
one whose lease expired while it was paused (a GC pause, a slow lookup) is rejected by the store's
fence when it tries to append (``StaleEpoch``), so it stops without writing. Whatever it did
remotely in the meantime carried the call's idempotency key, so the receiver holds at most one
effect and the next worker finds it by lookup.

Ordering inside an attempt follows the agent's own discipline: a retry's start is durable before
the request leaves, and its completion is appended only after the receiver answered. A crash between
the two leaves a start without a completion, which the next attempt settles by looking up again.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

from django.conf import settings
from django.db import connection, transaction

from recovery.errors import RunBusy
from recovery.models import UncertainCall
from recovery.projection_forms import KnownRows, rows_known
from runs.errors import FenceError, LeaseHeld, RunNotFound, StaleEpoch
from runs.faults import fault_point
from runs.leases import Lease, lease_acquire, lease_release, leases_release
from runs.store import NewEvent, events_append

log = logging.getLogger("reckon.recovery")
S = UncertainCall.State


def holder_name() -> str:
    # Computed per call, not at import: a forked Celery worker has its own pid.
    return f"reckon-recovery:{socket.gethostname()}:{os.getpid()}"

def commit_lazily() -> None:
    """Let this transaction commit without waiting for its WAL flush (PostgreSQL only).

    Used for lease bookkeeping only, never for history. It is safe because WAL is one sequence: the
    append that follows under this lease commits synchronously, and flushing its commit record
    flushes everything before it, this lease change included. If the server crashed before that, the
    lost lease was never used to write history, and the retry start that precedes any remote effect
    is itself such a synchronous append. It halves the fsyncs per reconciled call.
    """
    if connection.vendor == "postgresql":
        with connection.cursor() as cur:
            cur.execute("SET LOCAL synchronous_commit TO OFF")

def lease_take(run_id: str) -> Lease:
    """The run's lease for recovery. Taken outside a transaction, its statement commits lazily on
    PostgreSQL, as ``commit_lazily`` does for a transaction: one round trip instead of four."""
    return lease_acquire(run_id=run_id, holder=holder_name(), ttl_seconds=settings.RECKON_RECOVERY_LEASE_SECONDS, create=False, lazily=True)

def busy_error(run_id: str, exc: LeaseHeld) -> RunBusy:
    return RunBusy(f"run {run_id!r} is owned by {exc.holder!r} right now; try again when its lease ends")

class Owner:
    """The run's lease for the duration of one recovery write; appends carry its epoch.

    Appends are buffered and written by ``flush``: explicitly before any remote effect (a retry's
    start must be durable before the request leaves), and otherwise together with the lease's
    release in one transaction when the work is done.
    """

    def __init__(self, run_id: str, lease: Lease | None = None):
        self.run_id = run_id
        self.pending: list[NewEvent] = []
        if lease is None:
            held = None
            with transaction.atomic():
                commit_lazily()
                try:
                    lease = lease_take(run_id)
                except LeaseHeld as exc:
                    held = exc  # raised after the commit, so the refusal stays in the lease records
            if held is not None:
                raise held
        self.lease = lease
        self.epoch = self.lease.epoch
        self.seq = self.lease.last_seq
        # Rows read under this lease, handed to the projection with the append that follows them
        # directly (``recovery.projection_forms.projection_rider``).
        self.known: KnownRows | None = None

    def append(self, events: list[NewEvent]) -> None:
        self.pending.extend(events)

    def rows_read(self, rows: list[UncertainCall]) -> None:
        """``rows`` of the run are as they were at the lease's last seq (read with the lease, which
        reported the seq read with them): the projection may rely on them for the next append."""
        self.known = KnownRows(self.run_id, self.seq, self.epoch, tuple(rows))

    def flush(self) -> None:
        if self.pending:
            known = self.known
            if known is not None and known.last_seq == self.seq:
                with rows_known(known):
                    appended = events_append(run_id=self.run_id, epoch=self.epoch, expected_seq=self.seq, events=self.pending)
            else:
                appended = events_append(run_id=self.run_id, epoch=self.epoch, expected_seq=self.seq, events=self.pending)
            self.seq = appended[-1].seq
            self.pending = []

    def finish(self) -> None:
        """Write what is pending and give the lease up, in one transaction."""
        fenced = None
        with transaction.atomic():
            try:
                self.flush()
            except FenceError as exc:
                fenced = exc  # raised after the commit, so the store's record of the rejection stays
            else:
                lease_release(run_id=self.run_id, epoch=self.epoch)
        if fenced is not None:
            raise fenced

    def release(self) -> None:
        self.pending = []
        try:
            with transaction.atomic():
                commit_lazily()
                lease_release(run_id=self.run_id, epoch=self.epoch)
        except (StaleEpoch, RunNotFound):
            pass  # someone took the run over after our lease expired: it is theirs now

@contextmanager
def owning(run_id: str, lease: Lease | None = None):
    """Own the run for the block: its lease (taken here, or ``lease`` already taken by the caller),
    the block's appends written with the release in one transaction, or the lease given back."""
    try:
        owner = Owner(run_id, lease)
    except LeaseHeld as exc:
        raise busy_error(run_id, exc) from None
    try:
        yield owner
    except BaseException:
        owner.release()
        raise
    try:
        owner.finish()
    except BaseException:
        owner.release()  # the append was refused (fenced) or failed: nothing of ours was written
        raise

@dataclass
class AttemptResult:
    pk: int
    status: str  # acted | skipped | busy | fenced
    action: str = ""
    outcome: str = ""
    rule: str = ""
    detail: str = ""
    events: list[str] = field(default_factory=list)

# At most this many finished calls share one commit, and none waits for it longer than this: the
# lease (60 s by default) of a call waiting in the group keeps its run from everyone else.
GROUP_SIZE = 20

GROUP_HOLD_S = 0.5

class Group:
    """Calls whose work is done, waiting to append and release their leases in one transaction.

    A reconciled call costs one durable commit, about as much as the rest of its database work
    together. Calls of different runs share nothing but that commit: each append is fenced by its
    own run's epoch and updates its own projection rows inside the shared transaction, and each
    lease is released in it. A refused append (the lease was lost) writes nothing for that call and
    does not stop the others; any other error rolls the group back, and each call is then finished
    in its own transaction, as without grouping. Until the commit, every call's lease is held, so
    nothing else writes its run: the group commits when it is full, when its oldest finished call
    has waited ``GROUP_HOLD_S``, and before a second call of a run already in it
    is read, since that call must see the first one's events.
    """

    def __init__(self, size: int):
        self.size = max(1, int(size))
        self.hold_s = GROUP_HOLD_S
        self.members: list[tuple[Owner, AttemptResult]] = []
        self.since = 0.0

    def holds(self, run_id: str) -> bool:
        return any(o.run_id == run_id for o, _ in self.members)

    def run_ids(self) -> list[str]:
        return [o.run_id for o, _ in self.members]

    def add(self, owner: Owner, result: AttemptResult) -> None:
        if not self.members:
            self.since = time.monotonic()
        self.members.append((owner, result))

    def due(self) -> bool:
        return bool(self.members) and (len(self.members) >= self.size or time.monotonic() - self.since >= self.hold_s)

    def commit(self) -> None:
        members, self.members = self.members, []
        if not members:
            return
        saved = [(o.pending[:], o.seq) for o, _ in members]
        fenced = []
        try:
            with transaction.atomic():
                appended = []
                for o, r in members:
                    try:
                        o.flush()
                    except FenceError as exc:  # nothing of this call was written; the rest go on
                        fenced.append((o, r, exc))
                    else:
                        appended.append((o.run_id, o.epoch))
                # Each run's row is locked by its append's fence until the commit, so the leases go
                # back together, after the appends, as they would one by one.
                leases_release(appended)
        except Exception:
            log.warning("group commit of %d calls failed; finishing each on its own", len(members), exc_info=True)
            for (o, r), (pending, seq) in zip(members, saved):
                o.pending, o.seq = pending, seq
                attempt_finish(o, r)
            return
        for o, r, exc in fenced:
            o.release()
            attempt_fenced(r, exc)
        fault_point("after_append")

def attempt_fenced(result: AttemptResult, exc: FenceError) -> AttemptResult:
    # Our lease ended while we worked: a newer owner decides. Nothing of ours was written.
    log.warning("reconciliation fenced", extra={"pk": result.pk, "reason": str(exc)})
    result.status, result.detail, result.events = "fenced", str(exc), []
    return result

def attempt_finish(owner: Owner, result: AttemptResult) -> AttemptResult:
    """Append what the call left pending and release its lease, in one transaction of its own."""
    try:
        owner.finish()
    except FenceError as exc:
        owner.release()
        return attempt_fenced(result, exc)
    except Exception as exc:
        owner.release()  # nothing of ours was written
        log.exception("reconciliation of call %s failed", result.pk)
        result.status, result.detail, result.events = "error", f"{type(exc).__name__}: {exc}", []
    return result
