"""Celery tasks of the event store: each takes ids and calls one function.

Snapshots are written off the append path. ``snapshot_on_append`` is registered with
``runs.store.after_append_register`` and runs after every committed append; it only compares
integers (the settings' interval and minimum, no query) and, when the append crossed an interval
boundary, enqueues ``snapshot_maybe_task``. The task reads the run's own policy and writes a
snapshot only when one is due, so a boundary that a run's policy does not care about costs one
look at the policy, not a snapshot. Without ``REDIS_URL`` the task runs eagerly, in the appending
process, right after the commit.

Snapshots found unusable by a read are settled off the read path. ``snapshot_repair_enqueue`` is
registered with ``runs.snapshots.snapshot_miss_register``; the read that found the miss has already
computed its state from the full log, and only enqueues ``snapshot_repair_task``, which re-checks
the snapshot and discards it or quarantines its version. With a broker the read writes nothing.
Without ``REDIS_URL`` (eager tasks) the repair runs inline, in the reading process, right after the
read computed its state; a failing repair is logged and never changes what the read returns.
"""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings

from runs.snapshot_verify import snapshot_repair
from runs.snapshots import snapshot_maybe

log = logging.getLogger("reckon.snapshots")


@shared_task(name="runs.tasks.snapshot_maybe_task", ignore_result=True)
def snapshot_maybe_task(run_id: str) -> int | None:
    """Write the run's snapshot if its policy says one is due; the snapshot's seq, or None."""
    snap = snapshot_maybe(run_id)
    return snap.seq if snap is not None else None


@shared_task(name="runs.tasks.snapshot_repair_task", ignore_result=True)
def snapshot_repair_task(run_id: str, snapshot_id: int) -> str:
    """Re-check a snapshot a read could not use; discard it or quarantine its version. The outcome."""
    return snapshot_repair(run_id=run_id, snapshot_id=snapshot_id).outcome


def snapshot_repair_enqueue(run_id: str, snapshot_id: int, reason: str) -> None:
    """Miss handler of ``runs.snapshots``: hand the snapshot to a worker. Errors reach the caller,
    which logs them: a read never fails for a repair it could not enqueue."""
    snapshot_repair_task.delay(run_id, snapshot_id)


def snapshot_due(old_last: int, new_last: int, interval: int, min_events: int | None = None) -> bool:
    """Did an append from ``old_last`` to ``new_last`` cross a multiple of ``interval`` at or past
    ``min_events`` events? Pure integer arithmetic: it runs on every append. ``min_events`` None:
    the settings' minimum, read only for an append that crossed a boundary (each setting read costs
    a lazy-settings lookup)."""
    if interval <= 0 or old_last // interval == new_last // interval:
        return False
    return new_last >= (settings.RECKON_SNAPSHOT_MIN_EVENTS if min_events is None else min_events)


def snapshot_on_append(run_id: str, first_seq: int, last_seq: int) -> None:
    """After-commit hook: enqueue a snapshot check when the append crossed an interval boundary.

    The boundary is the settings' interval; a run's own policy (``SnapshotPolicy``) is applied by
    ``snapshot_maybe`` in the task, because reading it here would add a query to every append.
    """
    if not snapshot_due(first_seq - 1, last_seq, settings.RECKON_SNAPSHOT_INTERVAL):
        return
    try:
        snapshot_maybe_task.delay(run_id)
    except Exception:  # a broker outage costs a snapshot (a cache), never the append
        log.exception("could not enqueue a snapshot of run %s", run_id)
