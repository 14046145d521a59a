"""``manage.py bench recovery``: reconciliation throughput and projection rebuild speed.

- eager: calls/s of ``reconcile_pass`` in this process, each call one lease, one HTTP lookup against a
  local service that answers "match", and one fenced append (attempt, completion, resolution);
- celery: calls/s with a real Celery worker subprocess (``-c 2``) on Redis, from the first enqueue
  to the last call resolved; skipped, with a note, when REDIS_URL is not set;
- rebuild: events/s of ``projections_rebuild`` over a log of realistic runs.

Figures are medians of several rounds; nothing here asserts a time.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from django.conf import settings
from django.db import connection

from reckon.env import database_url
from recovery.detection import uncertain_calls_detect
from recovery.models import UncertainCall
from recovery.policy_changes import policies_load
from recovery.rebuild import projections_rebuild
from recovery.reconcile import reconcile_pass
from runs.leases import lease_acquire, lease_release
from runs.store import NewEvent, events_append
from runs.synthetic import calls_started, synthetic_events

ROOT = Path(__file__).resolve().parent.parent


class _Echo(BaseHTTPRequestHandler):
    """A fast ledger: every operation exists with the fields the lookup URL names (so: match)."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out as two writes: no 40 ms delayed-ACK stall

    def log_message(self, *args):
        pass

    def do_GET(self):
        q = urllib.parse.urlsplit(self.path).query
        body = json.dumps({k: v[0] for k, v in urllib.parse.parse_qs(q).items()}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def _service() -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _policies(port: int) -> None:
    url = f"http://127.0.0.1:{port}/ops/{{idempotency_key}}?tenant={{tenant}}&account={{account}}&amount={{amount}}&currency={{currency}}"
    policies_load(
        text=f"""
[tools.post_correction]
risk_class = "irreversible"
strategy = "reconcile_then_retry"
semantic_fields = ["tenant", "account", "amount", "currency"]
deadline = "1h"
lookup = {{ adapter = "http", url = "{url}", timeout = "5s" }}
""",
        by="bench",
    )


def _calls(prefix: str, n: int) -> None:
    """``n`` crashed runs, each with one uncertain correction."""
    for i in range(n):
        run_id = f"{prefix}-{i}"
        args = {"tenant": "acme", "account": str(4000 + i % 97), "amount": f"{i}.00", "currency": "GBP"}
        lease = calls_started(run_id, [("c1", "post_correction", args)], holder="bench-agent", ttl_seconds=600)
        lease_release(run_id=run_id, epoch=lease.epoch)
    uncertain_calls_detect()


def _eager(n: int, rounds: int) -> list[float]:
    rates = []
    for r in range(rounds):
        _calls(f"bench-eager-{r}-{time.monotonic_ns()}", n)
        t0 = time.perf_counter()
        summary = reconcile_pass(due_only=False)
        dt = time.perf_counter() - t0
        assert summary["actions"].get("complete") == n, summary
        rates.append(n / dt)
    return rates


def _celery(n: int, rounds: int) -> tuple[list[float], str]:
    from recovery.tasks import BATCH, reconcile_calls

    queue = f"reckon-bench-{os.getpid()}"
    env = dict(os.environ, DATABASE_URL=database_url(), LOG_LEVEL="ERROR", RECKON_LOG_LEVEL="ERROR")
    log = tempfile.TemporaryFile()  # never a pipe nobody reads: a full pipe would stall the worker
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "reckon", "worker", "-c", "2", "-Q", queue, "-l", "error", "--without-gossip", "--without-mingle", "--without-heartbeat"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    rates = []
    try:

        def run(prefix: str, count: int, timeout: float = 300) -> float:
            _calls(prefix, count)
            pks = list(UncertainCall.objects.filter(run_id__startswith=prefix + "-").values_list("pk", flat=True))
            t0 = time.perf_counter()
            for i in range(0, len(pks), BATCH):
                reconcile_calls.apply_async(args=[[[pk, 1] for pk in pks[i : i + BATCH]]], queue=queue)
            while UncertainCall.objects.filter(run_id__startswith=prefix + "-", state=UncertainCall.State.RESOLVED).count() < count:
                if worker.poll() is not None:
                    log.seek(0)
                    raise RuntimeError(f"celery worker exited: {log.read().decode()[-2000:]}")
                if time.perf_counter() - t0 > timeout:
                    raise RuntimeError("celery round did not finish in time")
                time.sleep(0.02)
            return time.perf_counter() - t0

        run(f"bench-warm-{time.monotonic_ns()}", 10, timeout=120)  # worker start-up is not throughput
        for r in range(rounds):
            rates.append(n / run(f"bench-celery-{r}-{time.monotonic_ns()}", n))
    finally:
        worker.terminate()
        try:
            worker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
    return rates, queue


def _rebuild(n_events: int, rounds: int) -> tuple[list[float], int]:
    per_run = 3000
    runs = max(1, n_events // per_run)
    for r in range(runs):
        run_id = f"bench-log-{r}-{time.monotonic_ns()}"
        lease = lease_acquire(run_id=run_id, holder="bench", ttl_seconds=3600)
        seq = 0
        events = [NewEvent("run_started", {"run_id": run_id})] + synthetic_events(run_id, 1, per_run - 2)
        # Each run dies with one start in flight: the rebuild has real rows to make.
        events.append(NewEvent("tool_call_started", {"call_id": "last", "name": "post_correction", "arguments": {"tenant": "acme", "n": r}}))
        for i in range(0, len(events), 500):
            batch = events[i : i + 500]
            events_append(run_id=run_id, epoch=lease.epoch, expected_seq=seq, events=batch)
            seq += len(batch)
        lease_release(run_id=run_id, epoch=lease.epoch)
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM reckon_event")
        total = cur.fetchone()[0]
    rates = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        projections_rebuild()
        rates.append(total / (time.perf_counter() - t0))
    return rates, total


def bench_recovery(*, quick: bool, out=None) -> dict:
    n = 60 if quick else 600
    rounds = 2 if quick else 3
    server = _service()
    figures: dict = {"engine": connection.vendor}
    try:
        _policies(server.server_address[1])
        eager = _eager(n, rounds)
        figures["eager_calls_per_s"] = round(statistics.median(eager), 1)
        if settings.REDIS_URL:
            from recovery.tasks import BATCH

            rates, _ = _celery(n, rounds)
            figures["celery_calls_per_s"] = round(statistics.median(rates), 1)
            figures["celery_workers"] = f"1 worker process, -c 2 (prefork), {BATCH} calls per task"
        else:
            figures["celery_calls_per_s"] = None
            figures["celery_note"] = "skipped: REDIS_URL is not set (tasks run eagerly)"
        rebuild, total = _rebuild(20_000 if quick else 200_000, rounds)
        figures["rebuild_events_per_s"] = round(statistics.median(rebuild))
        figures["rebuild_log_events"] = total
        figures["calls_per_round"] = n
    finally:
        server.shutdown()
        server.server_close()
    if out is not None:
        out.write(f"recovery ({figures['engine']}), {n} calls per round, median of {rounds}:\n")
        out.write(f"  reconciliation, eager:        {figures['eager_calls_per_s']:>10} calls/s\n")
        if figures["celery_calls_per_s"] is not None:
            out.write(f"  reconciliation, Celery+Redis: {figures['celery_calls_per_s']:>10} calls/s ({figures['celery_workers']})\n")
        else:
            out.write(f"  reconciliation, Celery+Redis: {figures['celery_note']}\n")
        out.write(f"  projection rebuild:           {figures['rebuild_events_per_s']:>10} events/s over {total} events\n")
    return figures
