"""``manage.py bench scale``: how Reckon's costs move as the store grows, and what one long log costs.

On PostgreSQL the store is grown in steps (10^5, 10^6 and, with ``--max-events 10000000``, 10^7
events) of runs of 1,000 events each, loaded in bulk (tool calls with about 100 bytes of
arguments and results, two open uncertain calls per run, and a 32-byte hash per event, as a
chained event carries). At each size it measures, through the real code paths:

- a fenced single append (one chained event on a run of its own), p50 of 200;
- the latest state of a long run (20,000 events: a snapshot plus a 300-event tail), median of 15;
- the queue's first page and a run looked up by id (the console's run page), p50 of 30 each, and
  the console's search when the console has one (``console:search``; measured as soon as it exists);
- the import of a generated log (``--log-events``, default 100,000) by a process of its own
  (``bench.probe``): events/s and its peak resident set size; then that run's JSONL export, streamed
  through the console's view: time to the first byte, events/s and peak RSS;
- the event table's and its indexes' bytes per event, and the queue table's size.

After the last size (and on SQLite, which has no curve: only this) the log is imported, exported
and replayed ``--repeats`` times (medians), and the folded state's own size is measured by loading
its serialised form in a fresh process and reading the RSS before and after.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from django.conf import settings
from django.db import connection
from django.urls import NoReverseMatch, reverse
from django.utils import timezone

from bench.console import load_calls_sql
from bench.scale_log import log_write
from runs.leases import lease_acquire
from runs.snapshots import run_state_fast, snapshot_write
from runs.selectors import run_state
from runs.store import NewEvent, events_append
from runs.synthetic import synthetic_events

ROOT = Path(__file__).resolve().parents[1]
PER_RUN = 1000
LONG_RUN, LONG_SNAPSHOT, LONG_TAIL = "scale-long", 19_700, 300

# Runs of PER_RUN events: a model turn, a read_ledger call's start and its completion, in turn; a
# post_correction start every 50 events (the queue's calls). The hash is a stand-in of a chained
# event's size (these bulk rows are not chained: this database is thrown away).
_FILL = """
INSERT INTO reckon_event (run_id, seq, type, v, ts, payload, epoch, recorded_at, hash)
SELECT 'bench-' || r, s,
       CASE WHEN s = 1 THEN 'run_started' WHEN s %% 50 = 0 THEN 'tool_call_started'
            WHEN s %% 3 = 0 THEN 'model_turn' WHEN s %% 3 = 1 THEN 'tool_call_started' ELSE 'tool_call_completed' END,
       2, now() - ((%(per)s - s) * interval '1 second'),
       CASE WHEN s = 1 THEN json_build_object('run_id', 'bench-' || r)
            WHEN s %% 50 = 0 THEN json_build_object('call_id', 'c' || s, 'name', 'post_correction', 'arguments',
                 json_build_object('tenant', 't' || (r %% 20), 'account', '4020', 'amount', '840.00'), 'idempotency_key', md5(r || '|' || s))
            WHEN s %% 3 = 0 THEN json_build_object('text', 'Reading ledger ' || (4000 + s %% 97) || '.', 'tool_calls',
                 json_build_array(json_build_object('id', 'c' || s, 'name', 'read_ledger', 'arguments', json_build_object('tenant', 'acme', 'account', (4000 + s %% 97)::text))),
                 'usage', json_build_object('input_tokens', 900, 'output_tokens', 60), 'cost_usd', 0.0031)
            WHEN s %% 3 = 1 THEN json_build_object('call_id', 'c' || s, 'name', 'read_ledger', 'arguments',
                 json_build_object('tenant', 'acme', 'account', (4000 + s %% 97)::text, 'period', '2026-Q3', 'memo', repeat('x', 40)),
                 'idempotency_key', substr(md5(r || ':' || s), 1, 24))
            ELSE json_build_object('call_id', 'c' || (s - 1), 'name', 'read_ledger', 'content',
                 json_build_object('balance', (1000 + s) || '.00', 'entries', s %% 300, 'memo', repeat('x', 40)), 'is_error', false,
                 'idempotency_key', substr(md5(r || ':' || (s - 1)), 1, 24))
       END,
       1, now(), sha256(convert_to(r || ':' || s, 'UTF8'))
  FROM generate_series(%(first)s, %(last)s) r, generate_series(1, %(per)s) s
"""
_FILL_RUNS = """
INSERT INTO reckon_run (run_id, origin, source_file, created_at, last_seq, lease_epoch, lease_holder)
SELECT 'bench-' || r, 'import', '', now(), %(per)s, 1, '' FROM generate_series(%(first)s, %(last)s) r
"""


def _fill(first: int, runs: int) -> None:
    params = {"first": first, "last": first + runs - 1, "per": PER_RUN}
    with connection.cursor() as c:
        c.execute(_FILL_RUNS, params)
        c.execute(_FILL, params)
    load_calls_sql(runs, PER_RUN, 2, timezone.now(), first=first)
    with connection.cursor() as c:
        c.execute("ANALYZE")


def _run_build(run_id: str, n: int, *, first_seq: int = 1, epoch: int | None = None) -> int:
    if epoch is None:
        epoch = lease_acquire(run_id=run_id, holder="bench", ttl_seconds=36_000).epoch
        events_append(run_id=run_id, epoch=epoch, expected_seq=0, events=[NewEvent("run_started", {"run_id": run_id})])
        first_seq = 2
    seq = first_seq
    while seq <= n:
        k = min(500, n - seq + 1)
        events_append(run_id=run_id, epoch=epoch, expected_seq=seq - 1, events=synthetic_events(run_id, seq, k, compact_every=1000))
        seq += k
    return epoch


def _p50_ms(fn, n: int) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return round(statistics.median(times), 2)


def _get(client, path: str):
    def get():
        resp = client.get(path)
        if resp.status_code != 200:
            raise RuntimeError(f"GET {path}: {resp.status_code}")

    return get


def _db_url() -> str:
    d = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{d['NAME']}"
    auth = d["USER"] + (f":{d['PASSWORD']}" if d.get("PASSWORD") else "")
    return f"postgres://{auth}@{d['HOST'] or '127.0.0.1'}:{d['PORT'] or 5432}/{d['NAME']}"


def _probe(*args: str) -> dict:
    env = {**os.environ, "DATABASE_URL": _db_url()}
    done = subprocess.run([sys.executable, "-m", "bench.probe", *args], cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"probe {' '.join(args)} failed: {(done.stderr or done.stdout).strip().splitlines()[-1:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


class _Logs:
    """Copies of one generated log under new run ids: the run id is the file's name and the
    first line's, so a copy rewrites the first line and copies the rest as bytes."""

    def __init__(self, folder: Path, events: int):
        self.folder = folder
        self.events = events
        self.template = folder / f"scale-template-{events}.jsonl"
        if not self.template.exists():
            log_write(self.template, events=events)

    def copy(self, run_id: str) -> Path:
        path = self.folder / f"{run_id}.jsonl"
        with self.template.open("rb") as src, path.open("wb") as dst:
            first = json.loads(src.readline())
            first["payload"]["run_id"] = run_id
            dst.write(json.dumps(first).encode() + b"\n")
            shutil.copyfileobj(src, dst, 1 << 20)
        return path


def _table_sizes() -> dict:
    with connection.cursor() as c:
        c.execute(
            "SELECT pg_relation_size('reckon_event') + pg_relation_size(reltoastrelid), pg_indexes_size('reckon_event'),"
            " pg_total_relation_size('reckon_uncertain_call'), (SELECT count(*) FROM reckon_uncertain_call)"
            " FROM pg_class WHERE relname = 'reckon_event'"
        )
        heap, indexes, queue, calls = c.fetchone()
        c.execute("SELECT count(*) FROM reckon_event")
        (events,) = c.fetchone()
    return {
        "events": events,
        "event_heap_bytes_per_event": round(heap / events, 1),
        "event_index_bytes_per_event": round(indexes / events, 1),
        "queue_calls": calls,
        "queue_table_mb": round(queue / 2**20, 1),
    }


def bench_scale(*, quick: bool = False, out=None, max_events: int | None = None, log_events: int | None = None, repeats: int = 3) -> dict:
    from django.contrib.auth.models import User
    from django.test import Client

    def say(text: str) -> None:
        if out is not None:
            out.write(text)

    settings.DEBUG = False
    max_events = max_events or (100_000 if quick else 1_000_000)
    log_events = log_events or (10_000 if quick else 100_000)
    sizes = [n for n in ((50_000,) if quick else ()) + (100_000, 1_000_000, 10_000_000) if n <= max_events]
    folder = Path(settings.BASE_DIR) / "var" / "bench-scale" / connection.vendor
    folder.mkdir(parents=True, exist_ok=True)
    logs = _Logs(folder, log_events)
    figures: dict = {"engine": connection.vendor, "log_events": log_events, "log_bytes": logs.template.stat().st_size, "sizes": []}
    say(f"bench scale on {connection.vendor}: store sizes {sizes if connection.vendor == 'postgresql' else '(none: the curve needs PostgreSQL)'}, a log of {log_events:,} events ({figures['log_bytes'] / 2**20:.0f} MB)")
    try:
        if connection.vendor == "postgresql":
            figures["sizes"] = _curve(sizes, logs, say, Client, User)
        figures["log"] = _log_figures(logs, repeats, say)
    finally:
        for f in folder.glob("scale-log-*.jsonl"):
            f.unlink()
    return figures


def _curve(sizes: list[int], logs: _Logs, say, Client, User) -> list[dict]:
    admin = User.objects.create_superuser("bench-admin", password=None)
    client = Client()
    client.force_login(admin)
    epoch = _run_build(LONG_RUN, LONG_SNAPSHOT)
    snapshot_write(run_id=LONG_RUN, state=run_state(run_id=LONG_RUN))
    _run_build(LONG_RUN, LONG_SNAPSHOT + LONG_TAIL, first_seq=LONG_SNAPSHOT + 1, epoch=epoch)
    append_epoch = lease_acquire(run_id="scale-append", holder="bench", ttl_seconds=36_000).epoch
    events_append(run_id="scale-append", epoch=append_epoch, expected_seq=0, events=[NewEvent("run_started", {"run_id": "scale-append"})])
    appended = [1]

    def append_one():
        seq = appended[0]
        events_append(run_id="scale-append", epoch=append_epoch, expected_seq=seq, events=synthetic_events("scale-append", seq + 1, 1))
        appended[0] = seq + 1

    try:
        search = reverse("console:search")
    except NoReverseMatch:
        search = None
    rows = []
    runs_loaded = 0
    say(f"{'events':>11} {'append ms':>9} {'state ms':>8} {'queue ms':>8} {'run ms':>7} {'search ms':>9} {'import ev/s':>11} {'import MB':>9} {'export 1st ms':>13} {'export ev/s':>11} {'export MB':>9} {'B/event':>7} {'idx B/ev':>8}")
    for size in sizes:
        t0 = time.perf_counter()
        want = max(1, (size - LONG_SNAPSHOT - LONG_TAIL - appended[0]) // PER_RUN)
        if want > runs_loaded:
            _fill(runs_loaded + 1, want - runs_loaded)
            runs_loaded = want
        load_s = time.perf_counter() - t0
        mid = f"bench-{max(1, runs_loaded // 2)}"
        run_state_fast(LONG_RUN)  # warm: the first read of a size loads the snapshot's pages
        row = {
            "store_events": size,
            "load_s": round(load_s, 1),
            "append_ms": _p50_ms(append_one, 200),
            "state_ms": _p50_ms(lambda: run_state_fast(LONG_RUN), 15),
            "queue_ms": _p50_ms(_get(client, "/queue/"), 30),
            "run_lookup_ms": _p50_ms(_get(client, f"/runs/{mid}/"), 30),
            "search_ms": _p50_ms(_get(client, f"{search}?q={mid}"), 30) if search else None,
        }
        imp = _probe("import", str(logs.copy(f"scale-log-{size}")))
        exp = _probe("export", f"scale-log-{size}")
        row.update(import_events_per_s=imp["events_per_s"], import_events_per_cpu_s=imp["events_per_cpu_s"], import_peak_rss_mb=imp["peak_rss_mb"], export_first_byte_ms=exp["first_byte_ms"], export_events_per_s=exp["events_per_s"], export_peak_rss_mb=exp["peak_rss_mb"])
        row.update(_table_sizes())
        rows.append(row)
        say(
            f"{row['events']:>11,} {row['append_ms']:>9} {row['state_ms']:>8} {row['queue_ms']:>8} {row['run_lookup_ms']:>7} {row['search_ms'] if search else '-':>9} "
            f"{row['import_events_per_s']:>11,} {row['import_peak_rss_mb']:>9} {row['export_first_byte_ms']:>13} {row['export_events_per_s']:>11,} {row['export_peak_rss_mb']:>9} "
            f"{row['event_heap_bytes_per_event']:>7} {row['event_index_bytes_per_event']:>8}"
        )
    if not search:
        say("(the console has no search route yet: the run-id lookup stands in; console:search is measured once it exists)")
    if len(rows) > 1:
        first, last = rows[0], rows[-1]
        ratios = {k: round(last[k] / first[k], 2) for k in ("append_ms", "state_ms", "queue_ms", "run_lookup_ms", "search_ms") if first.get(k)}
        say(f"growth {first['events']:,} -> {last['events']:,} events (flat means <= 2.0): " + ", ".join(f"{k} x{v}" for k, v in ratios.items()))
        rows.append({"ratios": ratios})
    return rows


def _log_figures(logs: _Logs, repeats: int, say) -> dict:
    # A log of a million events takes minutes per pass on this machine: the import (the figure
    # with a target per engine) is repeated, its export and replay by default only when the log is small.
    exports_replays = repeats if logs.events <= 100_000 else 1
    imports, exports, replays = [], [], []
    state_file = logs.folder / "scale-log-state.json"
    for i in range(repeats):
        run_id = f"scale-log-r{i}"
        imports.append(_probe("import", str(logs.copy(run_id))))
        if i < exports_replays:
            exports.append(_probe("export", run_id))
            replays.append(_probe("replay", run_id, str(state_file)))
    state = _probe("state", str(state_file))
    state_file.unlink()

    def med(rows, key):
        return statistics.median(r[key] for r in rows)

    doc = {
        "repeats": repeats,
        "export_replay_repeats": exports_replays,
        "import_events_per_s": med(imports, "events_per_s"),
        "import_events_per_cpu_s": med(imports, "events_per_cpu_s"),
        "import_peak_rss_mb": med(imports, "peak_rss_mb"),
        "export_first_byte_ms": med(exports, "first_byte_ms"),
        "export_events_per_s": med(exports, "events_per_s"),
        "export_events_per_cpu_s": med(exports, "events_per_cpu_s"),
        "export_peak_rss_mb": med(exports, "peak_rss_mb"),
        "replay_seconds": med(replays, "seconds"),
        "replay_peak_rss_mb": med(replays, "peak_rss_mb"),
        "state_mb": state["state_mb"],
        "baseline_rss_mb": med(imports, "baseline_rss_mb"),
        "runs": {"import": imports, "export": exports, "replay": replays, "state": state},
    }
    say(
        f"log of {logs.events:,} events, medians of {repeats} imports and {exports_replays} exports and replays: import {doc['import_events_per_s']:,.0f} events/s ({doc['import_events_per_cpu_s']:,.0f} per CPU second), peak {doc['import_peak_rss_mb']} MB; "
        f"export first byte {doc['export_first_byte_ms']} ms, {doc['export_events_per_s']:,.0f} events/s ({doc['export_events_per_cpu_s']:,.0f} per CPU second), peak {doc['export_peak_rss_mb']} MB; "
        f"replay {doc['replay_seconds']} s, peak {doc['replay_peak_rss_mb']} MB, of which the folded state {doc['state_mb']} MB "
        f"(a process's start-up alone: {doc['baseline_rss_mb']} MB)"
    )
    return doc
