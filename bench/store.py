"""``manage.py bench store``: the event store's figures on the configured database engine.

Side by side in one run: the raw single-row INSERT commit rate (the physical reference: what one
durable commit costs on this database), fenced single-event appends, fenced 100-event batches, full
replays (read, decode, upcast, fold) of a 4,000- and a 100,000-event run, and the fold alone per
decoded event. Rates are medians over several timed windows; replay times are medians of repeats.
Figures compared with each other (the fenced append against raw inserts) are taken call by call in
turn, and a cost is the median of each round's own ratio (``rates_in_turn``). The chain's cost on a
batch is the appending process's time linking it (canonical bytes and links) over the batch's whole
append time. ``--quick`` (a smoke run) times 3 windows of 0.25 s instead of 5 of 1.5 s, and replays
a 10,000-event run instead of the 100,000-event one.
"""

from __future__ import annotations

import statistics
import time
from datetime import datetime, timezone
from typing import Callable

import psycopg
from django.db import connection
from django.test.utils import override_settings

from runs.fold import fold
from runs.leases import lease_acquire
from runs.pg import round_trips_count
from runs.selectors import run_state
from runs.store import NewEvent, events_append, events_load
from runs.store_check import batch_canons, events_check
from runs.verify import chain_links, genesis
from runs.synthetic import synthetic_events


def run_build(run_id: str, n_events: int, batch: int = 500) -> int:
    """A run of ``n_events`` events written through the fenced append; returns its epoch."""
    lease = lease_acquire(run_id=run_id, holder="bench", ttl_seconds=3600)
    events_append(run_id=run_id, epoch=lease.epoch, expected_seq=0, events=[NewEvent("run_started", {"run_id": run_id})])
    seq = 1
    while seq < n_events:
        k = min(batch, n_events - seq)
        events_append(run_id=run_id, epoch=lease.epoch, expected_seq=seq, events=synthetic_events(run_id, seq + 1, k))
        seq += k
    return lease.epoch


def rate(fn: Callable[[], int], *, seconds: float, windows: int) -> float:
    """Median events/s of ``fn`` (which returns how many events it wrote) over timed windows."""
    return statistics.median(rates_in_turn({"fn": fn}, seconds=seconds, windows=windows)["fn"])


def rates_in_turn(fns: dict[str, Callable[[], int]], *, seconds: float, windows: int, clock: Callable[[], float] = time.perf_counter) -> dict[str, list[float]]:
    """Events/s of each of ``fns`` in each of ``windows`` rounds. Within a round (about ``seconds``
    times the number of functions long), the functions take turns call by call, each cycle starting one
    further along, and each call is timed: a round's rate of a function is its events over its own
    calls' time. Every figure of a round is taken in the same moments of the machine (a commit's
    fsync, another process's burst), so the ratio of two holds when the rates alone wander by more
    than the difference being measured. ``clock``: seconds, as ``time.perf_counter`` counts them."""
    names = list(fns)
    rates: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(windows):
        events = dict.fromkeys(names, 0)
        spent = dict.fromkeys(names, 0.0)
        deadline = clock() + seconds * len(names)
        cycle = 0
        while clock() < deadline or not cycle:
            for k in range(len(names)):
                name = names[(cycle + k) % len(names)]
                t0 = clock()
                events[name] += fns[name]()
                spent[name] += clock() - t0
            cycle += 1
        for name in names:
            rates[name].append(events[name] / spent[name] if spent[name] > 0 else 0.0)
    return rates


def cost_in_turn(rates: dict[str, list[float]], name: str, against: str) -> float:
    """What ``name`` costs against ``against``: the median over the rounds of 1 - its rate / the
    other's, each round's two windows taken minutes apart at most."""
    return statistics.median(1 - a / b for a, b in zip(rates[name], rates[against]))


def median_ms(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def raw_insert() -> Callable[[int], None]:
    """A single-row INSERT into a table shaped like the event table (same columns, same indexes),
    committed on its own: the physical cost of making one event row durable, with no fence."""
    payload = '{"content": "hello from the fenced append", "n": 1}'
    now = datetime.now(timezone.utc)
    with connection.cursor() as cur:
        if connection.vendor == "postgresql":
            cur.execute("CREATE TABLE bench_raw (LIKE reckon_event INCLUDING DEFAULTS INCLUDING IDENTITY INCLUDING INDEXES)")
        else:
            cur.execute(
                "CREATE TABLE bench_raw (id integer PRIMARY KEY AUTOINCREMENT, run_id varchar(200) NOT NULL, seq bigint NOT NULL, "
                "type varchar(64) NOT NULL, v smallint NOT NULL, ts datetime NOT NULL, payload text NOT NULL, epoch bigint NOT NULL, "
                "recorded_at datetime NOT NULL DEFAULT CURRENT_TIMESTAMP)"
            )
            cur.execute("CREATE UNIQUE INDEX bench_raw_run_seq ON bench_raw (run_id, seq)")
    sql = "INSERT INTO bench_raw (run_id, seq, type, v, ts, payload, epoch) VALUES (%s, %s, %s, %s, %s, %s, %s)"
    if connection.vendor == "postgresql":
        connection.ensure_connection()
        # The same client path as the fenced append, at its cheapest: one psycopg cursor kept for
        # the connection, a prepared statement, binary parameters.
        raw_cur = psycopg.Cursor(connection.connection)
        raw_sql = sql.replace("%s", "%b").replace("%b, %b)", "%b::json, %b)")

        def insert(seq: int) -> None:
            raw_cur.execute(raw_sql, ["raw", seq, "user_message", 2, now, payload, 1], prepare=True)

        return insert
    ts = connection.ops.adapt_datetimefield_value(now)

    def insert_sqlite(seq: int) -> None:
        with connection.cursor() as cur:
            cur.execute(sql, ["raw", seq, "user_message", 2, ts, payload, 1])

    return insert_sqlite


def bench_store(*, quick: bool = False, out=None, routes: bool = False) -> dict:
    # Snapshots are a cache written after the commit (by a worker; inline when tasks run eagerly)
    # and have their own suite (bench snapshots): here they would be measured as append time.
    with override_settings(RECKON_SNAPSHOT_INTERVAL=0):
        figures = _bench_store(quick=quick, out=out)
    if routes:
        from bench.notify import bench_notify_routes

        seconds, windows = (0.5, 3) if quick else (1.5, 5)
        figures.update(bench_notify_routes(seconds=seconds, windows=windows))
        if out is not None:
            out.write(f"  escalation append, routes loaded {figures['escalation_append_with_routes_per_s']:>12,.0f} events/s   (the outbox rows written in the same transaction)")
            out.write(f"  ... with no routes              {figures['escalation_append_without_routes_per_s']:>12,.0f} events/s   (with routes: {figures['routes_vs_none']:.0%} of it)")
            if "round_trips_with_routes" in figures:
                out.write(
                    f"  round trips per escalation append   {figures['round_trips_with_routes']:.2f} with routes, {figures['round_trips_without_routes']:.2f} without (the decision log's reads after the commit included)"
                )
    return figures


def _single_rates(*, seconds: float, windows: int) -> dict[str, list[float]]:
    """Raw inserts and fenced single appends, taking turns window by window so that the machine's
    drift reaches both alike."""
    insert = raw_insert()
    counter = iter(range(1, 10**9))

    def raw_one() -> int:
        insert(next(counter))  # autocommit: one statement, one durable commit
        return 1

    single_epoch = run_build("bench-single", 1)
    state = {"seq": 1}

    def fenced_one() -> int:
        events_append(run_id="bench-single", epoch=single_epoch, expected_seq=state["seq"], events=[NewEvent("user_message", {"content": "hello from the fenced append", "n": 1})])
        state["seq"] += 1
        return 1

    singles = {"raw": raw_one, "fenced": fenced_one}
    return rates_in_turn(singles, seconds=seconds, windows=windows)


def _batch_appender(run_id: str, batch: list[NewEvent]) -> Callable[[], int]:
    epoch = run_build(run_id, 1)
    at = {"seq": 1}

    def fenced_batch() -> int:
        events_append(run_id=run_id, epoch=epoch, expected_seq=at["seq"], events=batch)
        at["seq"] += len(batch)
        return len(batch)

    return fenced_batch


def _batch_rate(run_id: str, batch: list[NewEvent], *, seconds: float, windows: int) -> float:
    return rate(_batch_appender(run_id, batch), seconds=seconds, windows=windows)


def _bench_store(*, quick: bool, out) -> dict:
    say = out.write if out is not None else (lambda _s: None)
    seconds, windows = (0.25, 3) if quick else (1.5, 5)
    big = 10_000 if quick else 100_000
    say(f"store benchmark on {connection.vendor} ({'quick' if quick else 'full'}): medians of {windows} windows of {seconds}s")

    single_rounds = _single_rates(seconds=seconds, windows=windows)
    single_rates = {name: statistics.median(r) for name, r in single_rounds.items()}
    raw, fenced = single_rates["raw"], single_rates["fenced"]
    # A model's turns and messages: no read model subscribes, so the store's own path.
    conversation = [e for e in synthetic_events("bench-batch", 2, 300) if e.type == "model_turn"][:100]
    batched = _batch_rate("bench-batch", conversation, seconds=seconds, windows=windows)
    chain_us = _chain_us(conversation)
    # Turns, tool starts and completions: the uncertain-call projection and the run-tenant read
    # model are kept in the same transaction.
    batched_projected = _batch_rate("bench-batch-tools", synthetic_events("bench-batch-tools", 2, 100), seconds=seconds, windows=windows)

    trips = _round_trips(conversation) if connection.vendor == "postgresql" else None

    run_build("bench-4k", 4000)
    replay_4k = median_ms(lambda: run_state(run_id="bench-4k"), 9)
    run_build(f"bench-{big}", big)
    replay_big = median_ms(lambda: run_state(run_id=f"bench-{big}"), 3)
    decoded = events_load(run_id=f"bench-{big}")
    fold_ms = median_ms(lambda: fold(decoded), 3)

    figures = {
        "engine": connection.vendor,
        "raw_insert_per_s": round(raw, 1),
        "fenced_append_per_s": round(fenced, 1),
        "fenced_vs_raw": round(1 - cost_in_turn(single_rounds, "fenced", "raw"), 3),
        "fenced_batch_per_s": round(batched, 1),
        "chain_us_batch": round(chain_us, 1),
        "chain_cost_batch": round(chain_us * batched / 1e8, 3),
        "fenced_batch_with_projections_per_s": round(batched_projected, 1),
        "replay_4k_ms": round(replay_4k, 2),
        ("replay_100k_ms" if big == 100_000 else f"replay_{big // 1000}k_ms"): round(replay_big, 2),
        "replay_us_per_event": round(replay_big * 1000 / big, 3),
        "fold_us_per_event": round(fold_ms * 1000 / big, 3),
    }
    if trips:
        figures.update(round_trips_single=trips[0], round_trips_batch=trips[1])
    say(f"  raw single-row INSERT commits   {figures['raw_insert_per_s']:>12,.0f} /s   (physical reference: one event-shaped row, no fence)")
    say(f"  fenced single-event append      {figures['fenced_append_per_s']:>12,.0f} events/s   ({figures['fenced_vs_raw']:.0%} of raw, median of {windows} rounds' ratios, call by call in turn)")
    say(f"  fenced 100-event batch append   {figures['fenced_batch_per_s']:>12,.0f} events/s   (model turns: no read model subscribed)")
    say(f"  ... of which the hash chain     {chain_us:>12,.0f} us a batch   ({figures['chain_cost_batch']:.1%} of the batch's append: canonical bytes and links, in this process)")
    say(f"  ... with tool calls             {figures['fenced_batch_with_projections_per_s']:>12,.0f} events/s   (read models kept in the same transaction)")
    say(f"  full replay, 4,000 events       {figures['replay_4k_ms']:>12,.2f} ms")
    say(f"  full replay, {big:,} events   {replay_big:>12,.2f} ms   ({figures['replay_us_per_event']:.2f} us/event)")
    say(f"  fold alone on decoded events    {figures['fold_us_per_event']:>12,.3f} us/event")
    if trips:
        say(f"  round trips per append          {trips[0]:>12.2f} single, {trips[1]:.2f} per 100-event batch (libpq's trace)")
    return figures


def _chain_us(batch: list[NewEvent]) -> float:
    """Microseconds the appending process spends on the hash chain of one 100-event batch: its
    canonical bytes (``runs.store_check.batch_canons``, as ``events_check`` frames them) and their
    links (``runs.verify.chain_links``), timed on their own."""
    checked = events_check("bench-chain", 1, batch, True, datetime.now(timezone.utc))
    args = (1, checked.appended, checked.tss, checked.encoded, True)
    start = genesis("bench-chain")

    def chain() -> None:
        canons, _ = batch_canons(*args)
        chain_links(start, canons)

    return median_ms(chain, 51) * 1000


def _round_trips(batch: list[NewEvent]) -> tuple[float, float]:
    """Round trips of a fenced single append and of a 100-event batch, 20 of each traced."""
    single, many = _batch_appender("bench-trips-single", [NewEvent("user_message", {"content": "hello", "n": 1})]), _batch_appender("bench-trips-batch", batch)
    single(), many()  # prepared
    return round_trips_count(lambda: [single() for _ in range(20)]) / 20, round_trips_count(lambda: [many() for _ in range(20)]) / 20
