"""``manage.py bench api``: appends through the HTTP API next to appends straight into the store.

gunicorn serves Reckon on 127.0.0.1 (a free port, 2 sync workers) against the benchmark database
the bench command created; one client appends over a keep-alive connection with a Bearer token,
exactly as ``reckon_client.HttpTransport`` does. Side by side: single-event appends and 100-event
batches, through the API and through ``runs.store.events_append`` in this process, as events/s
(the median of several timed windows), plus the p50/p95 latency of the append endpoint. The target
is a batched API append of at least half the direct batched rate: the API adds one HTTP round
trip, the token lookup and JSON (de)serialisation per request, amortised over the batch.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from django.db import connection
from django.test.utils import override_settings

from access.tokens import token_create
from reckon.env import database_url
from runs.leases import lease_acquire
from runs.store import NewEvent, events_append
from runs.synthetic import synthetic_events

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gunicorn_start(*, workers: int = 2) -> tuple[subprocess.Popen, int]:
    """gunicorn serving reckon.wsgi against the current database; returns the process and port."""
    proc, port = gunicorn_spawn(workers=workers)
    gunicorn_ready(proc, port)
    return proc, port


def gunicorn_spawn(*, workers: int = 2) -> tuple[subprocess.Popen, int]:
    """gunicorn started as ``gunicorn_start`` starts it, without waiting for it to answer: the caller
    does other work while its workers import Django, then calls ``gunicorn_ready``."""
    port = free_port()
    # Snapshots off on both sides: they are written after the commit (inline when tasks run
    # eagerly) and measured by their own suite, not as append time.
    env = dict(
        os.environ,
        DATABASE_URL=database_url(),
        RECKON_LOG_LEVEL="WARNING",
        DEBUG="false",
        SECRET_KEY=os.environ.get("SECRET_KEY", "bench-only-secret"),
        RECKON_SNAPSHOT_INTERVAL="0",
        RECKON_API_TOKEN_RATE="0",  # the bench measures appends, not the per-token limit
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "reckon.wsgi:application", "-b", f"127.0.0.1:{port}", "-w", str(workers), "--log-level", "warning"],
        cwd=ROOT,
        env=env,
    )
    return proc, port


def gunicorn_ready(proc: subprocess.Popen, port: int) -> None:
    """Wait until the gunicorn ``gunicorn_spawn`` started answers; killed and raised if it never does."""
    # Generous: on a 2-core machine shared with other work, four workers importing Django take a while.
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"gunicorn exited with {proc.returncode}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/openapi.json", timeout=1).read()
            return
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("gunicorn did not answer within 120 s")


def _docs(events: list[NewEvent]) -> list[dict]:
    return [{"type": e.type, "payload": e.payload} for e in events]


class _Api:
    def __init__(self, port: int, secret: str):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        self.headers = {"Authorization": f"Bearer {secret}", "Content-Type": "application/json"}

    def post(self, path: str, body: dict) -> dict:
        self.conn.request("POST", path, body=json.dumps(body), headers=self.headers)
        resp = self.conn.getresponse()
        data = resp.read()
        if resp.status >= 300:
            raise RuntimeError(f"POST {path}: HTTP {resp.status}: {data[:300]!r}")
        return json.loads(data)


def _api_window(api: _Api, run_id: str, batch: int, total: int) -> tuple[float, list[float]]:
    lease = api.post(f"/api/runs/{run_id}/lease", {"holder": "bench", "ttl_seconds": 3600})
    api.post(f"/api/runs/{run_id}/events", {"epoch": lease["epoch"], "expected_seq": 0, "events": [{"type": "run_started", "payload": {"run_id": run_id}}]})
    seq, latencies = 1, []
    payloads = [_docs(synthetic_events(run_id, s, batch)) for s in range(1, total + 1, batch)]
    t0 = time.perf_counter()
    for docs in payloads:
        t = time.perf_counter()
        api.post(f"/api/runs/{run_id}/events", {"epoch": lease["epoch"], "expected_seq": seq, "events": docs})
        latencies.append((time.perf_counter() - t) * 1000)
        seq += batch
    return total / (time.perf_counter() - t0), latencies


def _direct_window(run_id: str, batch: int, total: int) -> float:
    lease = lease_acquire(run_id=run_id, holder="bench", ttl_seconds=3600)
    events_append(run_id=run_id, epoch=lease.epoch, expected_seq=0, events=[NewEvent("run_started", {"run_id": run_id})])
    seq = 1
    batches = [synthetic_events(run_id, s, batch) for s in range(1, total + 1, batch)]
    t0 = time.perf_counter()
    for events in batches:
        events_append(run_id=run_id, epoch=lease.epoch, expected_seq=seq, events=events)
        seq += batch
    return total / (time.perf_counter() - t0)


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def bench_api(*, quick: bool, out) -> dict:
    with override_settings(RECKON_SNAPSHOT_INTERVAL=0):
        return _bench_api(quick=quick, out=out)


def _bench_api(*, quick: bool, out) -> dict:
    repeats = 3
    single_n = 150 if quick else 600
    batch_n = 2000 if quick else 10000
    _, secret = token_create(name="bench api", scopes=["append", "read"])
    proc, port = gunicorn_start(workers=2)
    try:
        api = _Api(port, secret)
        _api_window(api, "bench-api-warmup", 1, 20)  # both workers import and connect first
        results: dict[str, list] = {"direct_single": [], "direct_batch": [], "api_single": [], "api_batch": []}
        single_lat: list[float] = []
        batch_lat: list[float] = []
        for r in range(repeats):
            results["direct_single"].append(_direct_window(f"bench-direct-1-{r}", 1, single_n))
            results["direct_batch"].append(_direct_window(f"bench-direct-100-{r}", 100, batch_n))
            rate, lat = _api_window(api, f"bench-api-1-{r}", 1, single_n)
            results["api_single"].append(rate)
            single_lat += lat
            rate, lat = _api_window(api, f"bench-api-100-{r}", 100, batch_n)
            results["api_batch"].append(rate)
            batch_lat += lat
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
    med = {k: statistics.median(v) for k, v in results.items()}
    figures = {
        "engine": connection.vendor,
        "server": "gunicorn, 2 sync workers, 127.0.0.1, one keep-alive client",
        "direct_single_events_per_s": round(med["direct_single"], 1),
        "api_single_events_per_s": round(med["api_single"], 1),
        "direct_batch100_events_per_s": round(med["direct_batch"], 1),
        "api_batch100_events_per_s": round(med["api_batch"], 1),
        "api_single_append_p50_ms": round(_pct(single_lat, 50), 2),
        "api_single_append_p95_ms": round(_pct(single_lat, 95), 2),
        "api_batch100_append_p50_ms": round(_pct(batch_lat, 50), 2),
        "api_batch100_append_p95_ms": round(_pct(batch_lat, 95), 2),
        "batched_api_vs_direct": round(med["api_batch"] / med["direct_batch"], 3),
        "target_batched_api_vs_direct": 0.5,
        "repeats": repeats,
    }
    if out is not None:
        out.write(f"api append on {figures['engine']} ({figures['server']}), median of {repeats}:\n")
        out.write(f"  single event : direct {figures['direct_single_events_per_s']:>9} ev/s   api {figures['api_single_events_per_s']:>9} ev/s   "
                  f"p50 {figures['api_single_append_p50_ms']} ms  p95 {figures['api_single_append_p95_ms']} ms\n")
        out.write(f"  100-event    : direct {figures['direct_batch100_events_per_s']:>9} ev/s   api {figures['api_batch100_events_per_s']:>9} ev/s   "
                  f"p50 {figures['api_batch100_append_p50_ms']} ms  p95 {figures['api_batch100_append_p95_ms']} ms\n")
        verdict = "meets" if figures["batched_api_vs_direct"] >= 0.5 else "MISSES"
        out.write(f"  batched api / direct = {figures['batched_api_vs_direct']} ({verdict} the target of >= 0.5)\n")
    return figures
