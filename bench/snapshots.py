"""``manage.py bench snapshots``: what a snapshot buys on the configured database engine.

A 100,000-event run (10,000 with ``--quick``) of a working agent that compacts its context every 300
events is replayed in full and from a snapshot at seq 99,500 plus its 500-event tail; snapshot write
and load times are measured on the same state; and ``snapshot_plan`` prices the illustrative
run (4,000 events, 6 recoveries, 300 ms objective) with costs measured here. A second, never-compacting
run (``runs.synthetic.synthetic_events`` without compaction, full mode only) shows the worst case: a state carrying every message
makes the snapshot itself large. Every figure is a median of several repeats.
"""

from __future__ import annotations

import time

from django.db import connection

from bench.store import median_ms
from runs.leases import lease_acquire
from runs.selectors import run_state
from runs.snapshot_plan import COMPACT_EVERY, plan_compute, plan_measure
from runs.snapshots import run_state_fast, snapshot_current, snapshot_restore, snapshot_write
from runs.store import NewEvent, events_append
from runs.synthetic import synthetic_events

TAIL = 500


def _build(run_id: str, n: int, make) -> None:
    lease = lease_acquire(run_id=run_id, holder="bench", ttl_seconds=3600)
    events_append(run_id=run_id, epoch=lease.epoch, expected_seq=0, events=[NewEvent("run_started", {"run_id": run_id})])
    seq = 1
    while seq < n:
        k = min(500, n - seq)
        events_append(run_id=run_id, epoch=lease.epoch, expected_seq=seq, events=make(run_id, seq + 1, k))
        seq += k


def _measure_run(run_id: str, n: int, repeats: int) -> dict:
    full = median_ms(lambda: run_state(run_id=run_id), max(3, repeats // 3))
    state = run_state(run_id=run_id, at=n - TAIL)
    write = median_ms(lambda: snapshot_write(run_id=run_id, state=state), repeats)
    snap, _ = snapshot_current(run_id=run_id)

    def load_only():
        s, exists = snapshot_current(run_id=run_id)
        assert snapshot_restore(run_id, s, exists, s.seq).state is not None

    load = median_ms(load_only, repeats)
    fast = median_ms(lambda: run_state_fast(run_id), repeats * 2)
    assert run_state_fast(run_id).to_dict() == run_state(run_id=run_id).to_dict(), "snapshot plus tail differs from the full replay"
    return {"full_replay_ms": full, "snapshot_write_ms": write, "snapshot_load_ms": load, "snapshot_plus_tail_ms": fast, "snapshot_bytes": len(snap.body.encode())}


def bench_snapshots(*, quick: bool = False, out=None) -> dict:
    say = out.write if out is not None else (lambda _s: None)
    n = 10_000 if quick else 100_000
    repeats = 5 if quick else 9
    say(f"snapshot benchmark on {connection.vendor} ({'quick' if quick else 'full'}): medians of {repeats} repeats")

    t0 = time.perf_counter()
    _build("bench-snap", n, lambda r, s, k: synthetic_events(r, s, k, compact_every=COMPACT_EVERY, recorded=False))
    say(f"  built a {n:,}-event compacting run in {time.perf_counter() - t0:.1f} s")
    main = _measure_run("bench-snap", n, repeats)
    figures: dict = {"engine": connection.vendor, "events": n, "tail": TAIL}
    figures.update({k: round(v, 2) for k, v in main.items()})
    rows = [
        (f"full replay, {n:,} events", main["full_replay_ms"], ""),
        (f"snapshot at {n - TAIL:,} + {TAIL}-event tail", main["snapshot_plus_tail_ms"], "(target <= 20 ms on PostgreSQL)"),
        ("snapshot load alone (fetch, digest, decode)", main["snapshot_load_ms"], f"({main['snapshot_bytes'] / 1024:,.0f} KiB body)"),
        ("snapshot write", main["snapshot_write_ms"], ""),
    ]
    for label, ms, note in rows:
        say(f"  {label:<44} {ms:>10,.2f} ms   {note}".rstrip())

    if not quick:
        _build("bench-snap-nocompact", n, synthetic_events)
        worst = _measure_run("bench-snap-nocompact", n, 3)
        figures["never_compacting"] = {k: round(v, 2) for k, v in worst.items()}
        say(f"  never-compacting run ({worst['snapshot_bytes'] / 1024 / 1024:,.1f} MiB state): full {worst['full_replay_ms']:,.0f} ms, "
            f"snapshot + tail {worst['snapshot_plus_tail_ms']:,.0f} ms, write {worst['snapshot_write_ms']:,.0f} ms")  # fmt: skip

    m = plan_measure(events=4000, repeats=repeats)
    plan = plan_compute(
        events=4000, recoveries=6, objective_ms=300, replay_ms_per_event=m.replay_ms_per_event,
        snapshot_write_ms=m.snapshot_write_ms, snapshot_load_ms=m.snapshot_load_ms,
    )  # fmt: skip
    ch = plan.chosen
    figures["plan_4000_6_300ms"] = {
        "replay_ms_per_event": round(m.replay_ms_per_event, 5),
        "snapshot_write_ms": round(m.snapshot_write_ms, 2),
        "full_replays_ms": round(plan.full_replays_ms, 2),
        "max_interval": plan.max_interval,
        "interval": ch.interval,
        "with_snapshots_ms": round(ch.with_snapshots_ms, 2),
        "break_even_recoveries": None if ch.break_even_recoveries is None else round(ch.break_even_recoveries, 4),
    }
    say("  snapshot_plan --events 4000 --recoveries 6 --objective-ms 300, costs measured here:")
    say(f"    c = {m.replay_ms_per_event * 1000:.2f} us/event, s = {m.snapshot_write_ms:.2f} ms; six full replays {plan.full_replays_ms:,.1f} ms")
    say(f"    largest K meeting 300 ms: {plan.max_interval if plan.max_interval is not None else 'any'}"
        f"{' (>= N: a full replay already meets it)' if plan.max_interval is None or plan.max_interval >= 4000 else ''}")  # fmt: skip
    be = "never (no saving)" if ch.break_even_recoveries is None else f"{ch.break_even_recoveries:.3f} recoveries per run"
    say(f"    at K={ch.interval:,}: {ch.with_snapshots_ms:,.1f} ms with snapshots, break-even {be}")
    k500 = next(r for r in plan.table if r.interval == 500)
    figures["plan_4000_6_300ms"]["k500_with_snapshots_ms"] = round(k500.with_snapshots_ms, 2)
    figures["plan_4000_6_300ms"]["k500_break_even_recoveries"] = round(k500.break_even_recoveries, 4)
    say(f"    at K=500 (the default interval): {k500.with_snapshots_ms:,.1f} ms with snapshots, break-even {k500.break_even_recoveries:.3f} recoveries per run")
    return figures
