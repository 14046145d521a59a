"""Snapshot economics (docs/schema-versions.md, "Choosing an interval"): is a snapshot interval worth its writes, and which one meets the objective?

With N events per run, interval K, replay cost c per event, snapshot write cost s and R expected
recoveries per run, uniformly spread through the run:

    full replays          R * N/2 * c
    with snapshots        ceil(N/K) * s + R * K/2 * c
    break-even R          ceil(N/K) * s / ((N - K)/2 * c)      recoveries per run at which they cost the same
    worst-case tail       (K - 1) * c                           the largest K with this <= objective is the answer

``plan_compute`` is the arithmetic alone; ``plan_measure`` measures c and s on the configured
database, inside a transaction that is rolled back, so it leaves nothing behind.
"""

from __future__ import annotations

import math
import statistics
import time
import uuid
from dataclasses import asdict, dataclass, field

from django.db import connection, transaction

from runs.fold import fold
from runs.leases import lease_acquire
from runs.snapshots import snapshot_current, snapshot_restore, snapshot_write
from runs.store import NewEvent, events_append, events_load
from runs.synthetic import synthetic_events

# A working agent compacts its context every this many events (runs.synthetic).
COMPACT_EVERY = 300

STANDARD_INTERVALS = (100, 250, 500, 1000, 2000)


@dataclass
class IntervalCost:
    interval: int
    snapshots_per_run: int
    with_snapshots_ms: float
    saving_ms: float
    break_even_recoveries: float | None  # None: this interval saves nothing per recovery
    worst_case_tail_ms: float
    meets_objective: bool


@dataclass
class Plan:
    events: int
    recoveries: float
    objective_ms: float
    replay_ms_per_event: float
    snapshot_write_ms: float
    full_replay_ms_per_recovery: float
    full_replays_ms: float
    max_interval: int | None  # largest K whose worst-case tail (K - 1 events) meets the objective; None: any
    chosen: IntervalCost
    table: list[IntervalCost] = field(default_factory=list)
    snapshot_load_ms: float | None = None
    max_interval_with_load: int | None = None  # the same, leaving room for loading the snapshot
    measured_on: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


def _largest_interval(budget_ms: float, c: float) -> int | None:
    if budget_ms < 0:
        return 0  # not even a snapshot at every event meets it
    if c <= 0:
        return None
    return math.floor(budget_ms / c + 1e-9) + 1


def interval_cost(*, events: int, recoveries: float, objective_ms: float, c: float, s: float, interval: int) -> IntervalCost:
    n, k = events, interval
    writes = math.ceil(n / k)
    with_ms = writes * s + recoveries * k / 2 * c
    full = recoveries * n / 2 * c
    saving_per_recovery = (n - k) / 2 * c
    break_even = writes * s / saving_per_recovery if saving_per_recovery > 0 else None
    tail = (k - 1) * c
    return IntervalCost(k, writes, with_ms, full - with_ms, break_even, tail, tail <= objective_ms)


def plan_compute(
    *,
    events: int,
    recoveries: float,
    objective_ms: float,
    replay_ms_per_event: float,
    snapshot_write_ms: float,
    interval: int | None = None,
    snapshot_load_ms: float | None = None,
) -> Plan:
    """The figures docs/schema-versions.md ("Choosing an interval") defines, for these inputs. ``interval`` defaults to the largest K meeting the objective."""
    c, s = replay_ms_per_event, snapshot_write_ms
    k_max = _largest_interval(objective_ms, c)
    k = interval or min(k_max if k_max is not None else events, events)
    k = max(k, 1)
    kw = dict(events=events, recoveries=recoveries, objective_ms=objective_ms, c=c, s=s)
    table = [interval_cost(**kw, interval=i) for i in sorted({*STANDARD_INTERVALS, k}) if i <= events]
    plan = Plan(
        events=events,
        recoveries=recoveries,
        objective_ms=objective_ms,
        replay_ms_per_event=c,
        snapshot_write_ms=s,
        full_replay_ms_per_recovery=events / 2 * c,
        full_replays_ms=recoveries * events / 2 * c,
        max_interval=k_max,
        chosen=interval_cost(**kw, interval=k),
        table=table,
    )
    if snapshot_load_ms is not None:
        plan.snapshot_load_ms = snapshot_load_ms
        plan.max_interval_with_load = _largest_interval(objective_ms - snapshot_load_ms, c)
    return plan


@dataclass
class Measured:
    replay_ms_per_event: float
    snapshot_write_ms: float
    snapshot_load_ms: float
    events: int
    engine: str


class _Rollback(Exception):
    pass


def plan_measure(*, events: int, repeats: int = 5) -> Measured:
    """Measure c, s and the snapshot load time on the configured database with a run of ``events``.

    The run is written through the ordinary append path and every write happens in one transaction
    that is rolled back: nothing is left behind. On SQLite that transaction holds the write lock for
    the few seconds the measurement takes.
    """
    run_id = f"snapshot-plan-{uuid.uuid4().hex[:12]}"
    result: Measured | None = None
    try:
        with transaction.atomic():
            lease = lease_acquire(run_id=run_id, holder="snapshot-plan", ttl_seconds=3600)
            events_append(run_id=run_id, epoch=lease.epoch, expected_seq=0, events=[NewEvent("run_started", {"run_id": run_id})])
            seq = 1
            while seq < events:
                k = min(500, events - seq)
                events_append(run_id=run_id, epoch=lease.epoch, expected_seq=seq, events=synthetic_events(run_id, seq + 1, k, compact_every=COMPACT_EVERY, recorded=False))
                seq += k
            replay, write, load = [], [], []
            state = None
            for _ in range(repeats):
                t0 = time.perf_counter()
                state = fold(events_load(run_id=run_id))
                replay.append((time.perf_counter() - t0) * 1000)
            for _ in range(repeats):
                t0 = time.perf_counter()
                snapshot_write(run_id=run_id, state=state)
                write.append((time.perf_counter() - t0) * 1000)
            for _ in range(repeats):
                t0 = time.perf_counter()
                snap, exists = snapshot_current(run_id=run_id)
                restored = snapshot_restore(run_id, snap, exists, None)
                load.append((time.perf_counter() - t0) * 1000)
                assert restored.state is not None, restored.detail
            result = Measured(statistics.median(replay) / events, statistics.median(write), statistics.median(load), events, connection.vendor)
            raise _Rollback
    except _Rollback:
        pass
    assert result is not None
    return result
