"""``manage.py bench load [--duration S]``: a load test shaped like production, with checks after it.

The command starts, on 127.0.0.1 and against the benchmark database the bench command created:

- gunicorn with ``reckon.gunicorn_conf`` (several workers with threads, DEBUG off), as the
  Procfile's web process;
- a Celery worker (``-c 2``) and beat scanning for uncertain calls every 2 s, on its own queue in
  REDIS_URL's Redis;
- the receiver (``bench/receiver.py``), a ledger service that executes and looks up operations and
  counts effects per idempotency key;
- Locust (``bench/locustfile.py``) for the duration: agents appending through the API with append
  tokens (some of them dying mid-call), and 5 operators signed in to the console browsing and
  deciding.

After the run it waits (``--drain``) for reconciliation to settle what it can, stops everything,
and prints per-route p50/p95/p99, throughput, error counts and uncertain calls created against
resolved, then the checks, one ``PASS``/``FAIL`` line each:

- every acknowledged append is in the log exactly once, at the seqs it was acknowledged with;
- no call was executed twice on the receiver (an operator's retry excepted);
- every call Reckon settled as done has exactly one effect on the receiver;
- no request failed (no 5xx, no refused connection, no unexpected status);
- after the drain no uncertain call is left for reconciliation (escalated ones wait for people).

A FAIL ends the command non-zero. The speed targets are reported as met or missed, never failed:
this is a benchmark on a shared machine, not a timed test.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path

from django.conf import settings
from django.contrib.auth.hashers import make_password
from django.contrib.auth.models import Group, User
from django.db import connection

from access.roles import ONCALL, roles_ensure
from access.tokens import token_create
from bench.api import free_port
from reckon.env import database_url
from recovery.models import InFlightCall, UncertainCall
from recovery.policy_changes import policies_load

ROOT = Path(__file__).resolve().parent.parent
PASSWORD = "load-test-operator-password"
TARGET_EVENTS_PER_S = 200
TARGET_PAGE_P95_MS = 300
S = UncertainCall.State


class LoadFailed(Exception):
    """A check after the load failed; its message names the checks."""


class _Procs:
    """The processes this run started, stopped in reverse order whatever happens."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.procs: list[tuple[str, subprocess.Popen]] = []

    def start(self, name: str, args: list[str], env: dict) -> subprocess.Popen:
        # A file, never a pipe nobody reads: a full pipe stalls the child. The child keeps its own copy.
        with open(self.tmp / f"{name}.log", "wb") as log:
            proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append((name, proc))
        return proc

    def log_tail(self, name: str) -> str:
        path = self.tmp / f"{name}.log"
        return path.read_text(errors="replace")[-1500:] if path.exists() else ""

    def stop(self, *names: str, timeout: float = 20) -> None:
        """Stop the processes named, all at once: each is sent SIGTERM, then each is waited for
        (killed if it takes longer than ``timeout``), so their shutdowns overlap."""
        live = [proc for n, proc in self.procs if n in names and proc.poll() is None]
        for proc in live:
            proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for proc in live:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def stop_all(self) -> None:
        self.stop(*(name for name, _ in reversed(self.procs)))

    def wait_http(self, name: str, url: str, timeout: float = 40) -> None:
        proc = dict(self.procs)[name]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode}: {self.log_tail(name)}")
            try:
                with urllib.request.urlopen(url, timeout=2) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"{name} did not answer {url} within {timeout:.0f} s: {self.log_tail(name)}")


def _policies(receiver: str) -> None:
    ops = f'lookup = {{ adapter = "http", url = "{receiver}/operations/{{idempotency_key}}", timeout = "2s" }}\nexecute = {{ adapter = "http", url = "{receiver}/operations", method = "POST" }}'
    fields = 'semantic_fields = ["tenant", "account", "amount", "currency"]'
    policies_load(
        text=f"""
[tools.read_ledger]
risk_class = "read_only"
strategy = "reconcile_then_retry"
deadline = "1h"

[tools.post_correction]
risk_class = "irreversible"
strategy = "reconcile_then_retry"
{fields}
deadline = "1h"
{ops}

[tools.issue_refund]
risk_class = "irreversible"
strategy = "escalate"
{fields}
deadline = "1h"
{ops}
""",
        by="bench load",
    )


def _actors(*, agents: int, operators: int) -> tuple[list[str], list[str]]:
    """One append token per agent (as each deployed agent has its own) and signed-in on-call operators."""
    roles_ensure()
    group = Group.objects.get(name=ONCALL)
    # They share one password: hashed once (a second of the hasher's work for every five).
    encoded = make_password(PASSWORD)
    names = []
    for i in range(operators):
        user, _ = User.objects.get_or_create(username=f"load-operator-{i + 1}")
        user.password = encoded
        user.save()
        user.groups.add(group)
        names.append(user.username)
    tokens = [token_create(name=f"load agent {i + 1}", scopes=["append"])[1] for i in range(agents)]
    return tokens, names


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))] if ordered else 0.0


def _calls_left() -> int:
    """Calls reconciliation has yet to settle: those in its queue, and starts still in flight on
    their run's row (an agent that died holds its lease until it expires; detection then queues the
    call), so the drain waits for the last agents' calls too."""
    queued = UncertainCall.objects.filter(run_id__startswith="load-", state__in=[S.IN_FLIGHT, S.OPEN, S.RECONCILING]).count()
    return queued + InFlightCall.objects.filter(run_id__startswith="load-").count()


def _check_acks(acks: list) -> tuple[bool, str]:
    """Every acknowledged event is in the log at its acknowledged seq, and only once in its run."""
    with connection.cursor() as cur:
        cur.execute("SELECT run_id, seq, payload->>'load_id' FROM reckon_event WHERE run_id LIKE 'load-%%'")
        stored = {(run, seq): lid for run, seq, lid in cur.fetchall()}
    occurrences = Counter(lid for lid in stored.values() if lid is not None)
    acked = missing = moved = twice = 0
    acked_ids = set()
    for run_id, first, last, ids in acks:
        if last - first + 1 != len(ids):
            moved += len(ids)
            continue
        for seq, lid in zip(range(first, last + 1), ids):
            acked += 1
            acked_ids.add(lid)
            found = stored.get((run_id, seq))
            if found is None:
                missing += 1
            elif found != lid:
                moved += 1
            if occurrences[lid] > 1:
                twice += 1
    unacked = sum(1 for lid in occurrences if lid not in acked_ids)
    ok = acked > 0 and missing == moved == twice == 0
    detail = f"{acked} acknowledged events: {acked - missing - moved} in the log at their seqs, {missing} missing, {moved} at another seq, {twice} stored twice"
    return ok, detail + f" ({unacked} stored whose answer never reached the agent, at the stop)"


def _check_effects(effects: dict[str, int]) -> tuple[bool, str, bool, str]:
    with connection.cursor() as cur:
        cur.execute("SELECT DISTINCT payload->>'idempotency_key' FROM reckon_event WHERE run_id LIKE 'load-%%' AND type = 'approval_decided' AND payload->>'decision' = 'retry_same_key'")
        retried = {k for (k,) in cur.fetchall()}
    twice = {k: n for k, n in effects.items() if n > 1 and not (k in retried and n == 2)}
    ok = not twice
    most = max(effects.values(), default=0)
    detail = f"{len(effects)} keys executed, at most {most} effect(s) per key, {len(retried)} retries chosen by operators"
    if twice:
        detail += f"; executed more than once: {dict(list(twice.items())[:5])}"
    done = UncertainCall.objects.filter(run_id__startswith="load-", state=S.RESOLVED, disposition__in=["completed", "retried"]).values_list("idempotency_key", "disposition")
    wrong = [(k, d, effects.get(k, 0)) for k, d in done if effects.get(k, 0) != 1]
    done_detail = f"{len(done)} calls settled as done, {len(done) - len(wrong)} with exactly one effect"
    if wrong:
        done_detail += f"; otherwise: {wrong[:5]}"
    return ok, detail, not wrong, done_detail


def bench_load(*, quick: bool, out, duration: float = 60, agents: int = 10, operators: int = 5, web_workers: int = 4, drain: float = 60) -> dict:
    if connection.vendor != "postgresql" or not settings.REDIS_URL:
        raise LoadFailed("bench load needs PostgreSQL and Redis: set DATABASE_URL=postgres://... and REDIS_URL=redis://...")
    duration = 10 if quick and duration == 60 else duration
    tmp = Path(tempfile.mkdtemp(prefix="reckon-load-"))
    procs = _Procs(tmp)
    say = (lambda line: out.write(line + "\n")) if out is not None else (lambda line: sys.stderr.write(line + "\n"))
    try:
        return _bench_load(procs, tmp, say, duration=duration, agents=agents, operators=operators, web_workers=web_workers, drain=drain)
    finally:
        procs.stop_all()
        shutil.rmtree(tmp, ignore_errors=True)


def _bench_load(procs: _Procs, tmp: Path, say, *, duration: float, agents: int, operators: int, web_workers: int, drain: float) -> dict:
    receiver_port, web_port = free_port(), free_port()
    receiver = f"http://127.0.0.1:{receiver_port}"
    web = f"http://127.0.0.1:{web_port}"
    queue = f"reckon-load-{os.getpid()}"
    (tmp / "prometheus").mkdir()
    env = dict(
        os.environ,
        DATABASE_URL=database_url(),
        REDIS_URL=settings.REDIS_URL,
        CELERY_DEFAULT_QUEUE=queue,  # this run's own queue: other users of the same Redis never see its tasks
        PROMETHEUS_MULTIPROC_DIR=str(tmp / "prometheus"),
        DEBUG="false",
        SECRET_KEY=os.environ.get("SECRET_KEY") or "load-test-only-secret-" + "x" * 40,
        ALLOWED_HOSTS="127.0.0.1",
        RECKON_HTTPS="false",
        RECKON_LOG_LEVEL="WARNING",
        LOG_LEVEL="ERROR",
        RECKON_RECOVERY_SCAN_S="2",
        RECKON_RECOVERY_BACKOFF_S="1",
        WEB_BIND=f"127.0.0.1:{web_port}",
        WEB_WORKERS=str(web_workers),
        WEB_THREADS="4",
    )
    _policies(receiver)
    tokens, operator_names = _actors(agents=agents, operators=operators)
    py = sys.executable

    procs.start("receiver", [py, str(ROOT / "bench" / "receiver.py"), str(receiver_port)], env)
    procs.start("web", [py, "-m", "gunicorn", "-c", "python:reckon.gunicorn_conf", "reckon.wsgi:application"], env)
    celery = [py, "-m", "celery", "-A", "reckon"]
    procs.start("worker", [*celery, "worker", "-c", "2", "-Q", queue, "-l", "error", "--without-gossip", "--without-mingle", "--without-heartbeat"], env)
    procs.start("beat", [*celery, "beat", "-l", "error", "-s", str(tmp / "beat-schedule"), "--pidfile="], env)
    procs.wait_http("receiver", f"{receiver}/effects")
    procs.wait_http("web", f"{web}/readyz")

    config = {
        "agents": agents,
        "operators_count": operators,
        "agent_tokens": tokens,
        "operators": operator_names,
        "password": PASSWORD,
        "receiver": receiver,
        "lease_ttl_s": 4,
        "die_probability": 0.3,
        "warmup_s": min(5.0, duration / 4),
        "out": str(tmp / "results.json"),
    }
    (tmp / "config.json").write_text(json.dumps(config))
    load_before = os.getloadavg()[0]
    say(f"load: {agents} agents and {operators} operators for {duration:g} s against gunicorn ({web_workers} workers x 4 threads), a Celery worker (-c 2) and beat, on {web}")
    locust_env = dict(env, RECKON_LOAD_CONFIG=str(tmp / "config.json"), PYTHONPATH=str(ROOT))
    users = agents + operators
    args = [py, "-m", "locust", "-f", str(ROOT / "bench" / "locustfile.py"), "--headless", "--host", web, "-u", str(users), "-r", str(users)]
    args += ["-t", f"{duration:g}s", "--only-summary", "--loglevel", "ERROR", "--exit-code-on-error", "0"]
    locust = procs.start("locust", args, locust_env)
    try:
        locust.wait(duration + 120)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"locust did not stop within {duration + 120:.0f} s: {procs.log_tail('locust')}") from None
    if not (tmp / "results.json").exists():
        raise RuntimeError(f"locust exited with {locust.returncode} and no results: {procs.log_tail('locust')}")
    results = json.loads((tmp / "results.json").read_text())
    elapsed = results["measured_s"]

    # Reconciliation settles what the evidence can: wait for it, as long as --drain allows.
    t_drain = time.monotonic()
    while _calls_left() and time.monotonic() - t_drain < drain:
        for name in ("web", "worker", "beat", "receiver"):
            if dict(procs.procs)[name].poll() is not None:
                raise RuntimeError(f"{name} exited during the run: {procs.log_tail(name)}")
        time.sleep(0.2)
    drained = time.monotonic() - t_drain
    procs.stop("beat", "worker", "web")
    with urllib.request.urlopen(f"{receiver}/effects", timeout=5) as resp:
        effects = json.loads(resp.read())
    procs.stop("receiver")
    say(f"machine: {os.cpu_count()} cores, load average {load_before:.1f} before the load and {os.getloadavg()[0]:.1f} after it (other work on the machine slows every figure)")
    return _report(say, results, effects, elapsed=elapsed, drained=drained, duration=duration, warmup=config["warmup_s"])


def _report(say, results: dict, effects: dict, *, elapsed: float, drained: float, duration: float, warmup: float) -> dict:
    times, errors, counts = results["times_ms"], results["errors"], results["counts"]
    routes = {}
    # A route called only during the warm-up (a short load whose agents took their one lease then)
    # is still listed, with nothing timed.
    for name in sorted(set(times) | set(results.get("called", {}))):
        t = times.get(name, [])
        e = errors.get(name, {})
        ms = {f"p{p}_ms": round(_pct(t, p), 1) if t else None for p in (50, 95, 99)}
        routes[name] = {"n": len(t), **ms, "5xx": e.get("5xx", 0), "failures": e.get("failure", 0)}
    pages = {n: r for n, r in routes.items() if n.startswith("GET /") and n != "GET /login/" and r["n"]}
    events_per_s = counts.get("events_measured", 0) / elapsed
    pages_per_s = counts.get("pages_measured", 0) / elapsed
    worst_page = max(pages.items(), key=lambda kv: kv[1]["p95_ms"], default=("none", {"p95_ms": 0.0}))
    n5xx = sum(r["5xx"] for r in routes.values())
    nfail = sum(r["failures"] for r in routes.values())
    calls = UncertainCall.objects.filter(run_id__startswith="load-")
    created = calls.filter(uncertain_seq__isnull=False).count()
    by_state = Counter(calls.values_list("state", flat=True))
    by_disposition = Counter(calls.filter(state=S.RESOLVED).values_list("disposition", flat=True))

    say(f"{'route':<38} {'n':>6} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'5xx':>5} {'fail':>5}")
    for name, r in routes.items():
        if not r["n"]:
            say(f"{name:<38} {0:>6} {'-':>8} {'-':>8} {'-':>8} {r['5xx']:>5} {r['failures']:>5}   called during the warm-up only")
            continue
        say(f"{name:<38} {r['n']:>6} {r['p50_ms']:>8} {r['p95_ms']:>8} {r['p99_ms']:>8} {r['5xx']:>5} {r['failures']:>5}")
    say(f"measured over {elapsed:.1f} s after {warmup:g} s of warm-up (sign-ins, first leases and connections; checked, not timed)")
    say(f"appended: {counts.get('events_measured', 0)} events = {events_per_s:.1f} events/s ({counts.get('events_acked', 0)} in all); pages: {pages_per_s:.1f}/s")
    say(f"errors: {n5xx} 5xx, {nfail} failures; runs opened {counts.get('runs_opened', 0)}, finished {counts.get('runs_finished', 0)}")
    died = {k.removeprefix("died_"): v for k, v in counts.items() if k.startswith("died_")}
    say(f"agents died mid-call: {sum(died.values())} {dict(sorted(died.items()))}")
    decided = {k.removeprefix("decided_"): v for k, v in counts.items() if k.startswith("decided_")}
    say(f"operators decided: {dict(sorted(decided.items()))}, {counts.get('decide_conflicts', 0)} refused as stale or busy (someone acted first)")
    say(
        f"uncertain calls: {created} created, {by_state.get(S.RESOLVED, 0)} resolved {dict(sorted(by_disposition.items()))}, "
        f"{by_state.get(S.ESCALATED, 0)} escalated and waiting for a person, {_calls_left()} left for reconciliation after {drained:.1f} s of drain"
    )
    ev_ok = events_per_s >= TARGET_EVENTS_PER_S
    page_ok = worst_page[1]["p95_ms"] < TARGET_PAGE_P95_MS
    say(f"target >= {TARGET_EVENTS_PER_S} events/s appended: {'met' if ev_ok else 'MISSED'} ({events_per_s:.1f})")
    say(f"target page p95 < {TARGET_PAGE_P95_MS} ms: {'met' if page_ok else 'MISSED'} (slowest: {worst_page[0]} {worst_page[1]['p95_ms']} ms)")

    checks = []
    ok, detail = _check_acks(results["acks"])
    checks.append(("every acknowledged event is in the log exactly once", ok, detail))
    ok, detail, done_ok, done_detail = _check_effects(effects)
    checks.append(("no call was executed twice", ok, detail))
    checks.append(("every call settled as done took effect exactly once", done_ok, done_detail))
    checks.append(("no request failed", n5xx == nfail == 0, f"{n5xx} 5xx, {nfail} failures"))
    left = _calls_left()
    checks.append(("reconciliation settled every call it could", left == 0, f"{left} calls still in flight, open or reconciling"))
    for name, ok, detail in checks:
        say(f"{'PASS' if ok else 'FAIL'} {name}: {detail}")

    figures = {
        "engine": connection.vendor,
        "duration_s": duration,
        "measured_s": round(elapsed, 1),
        "warmup_s": warmup,
        "events_per_s": round(events_per_s, 1),
        "pages_per_s": round(pages_per_s, 2),
        "routes": routes,
        "errors_5xx": n5xx,
        "failures": nfail,
        "uncertain_created": created,
        "uncertain_resolved": by_state.get(S.RESOLVED, 0),
        "uncertain_escalated": by_state.get(S.ESCALATED, 0),
        "checks": {name: ok for name, ok, _ in checks},
    }
    failed = [name for name, ok, _ in checks if not ok]
    if failed:
        raise LoadFailed(f"{len(failed)} check(s) failed: {'; '.join(failed)}")
    return figures
