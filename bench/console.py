"""``manage.py bench console``: server time of the queue, the overview and the approval screen.

The data is loaded in bulk, straight into the tables (the suite runs in a throwaway database): runs
of ``events_per_run`` events with ``calls_per_run`` open uncertain calls each, about 1% of them past
their deadline. Each page is requested 200 times through Django's test client, in process, signed in
as an administrator; p50 and p95 are reported per page, plus the number of SQL queries each page
makes at two page sizes, which must not grow with the page size.
"""

from __future__ import annotations

import statistics
import time
from datetime import timedelta

from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

SIZES = {
    True: {"runs": 200, "events_per_run": 500, "calls_per_run": 10},  # 100,000 events, 2,000 calls
    False: {"runs": 10_000, "events_per_run": 500, "calls_per_run": 10},  # 5,000,000 events, 100,000 calls
}
TOOLS = (("post_correction", "irreversible"), ("issue_refund", "reversible"), ("read_ledger", "read_only"), ("create_ticket", "idempotent"))


def _load_pg(runs: int, per_run: int, calls: int, now) -> None:
    assert per_run >= 50 * calls, "each call starts at a multiple of 50"
    """Bulk load on PostgreSQL with generate_series: minutes instead of hours for 5M events."""
    with connection.cursor() as c:
        c.execute(
            "INSERT INTO reckon_run (run_id, origin, source_file, created_at, last_seq, lease_epoch, lease_holder) "
            "SELECT 'bench-' || r, 'import', '', now(), %s, 1, '' FROM generate_series(1, %s) r",
            [per_run, runs],
        )
        c.execute(
            "INSERT INTO reckon_event (run_id, seq, type, v, ts, payload, epoch, recorded_at) "
            "SELECT 'bench-' || r, s, CASE WHEN s = 1 THEN 'run_started' WHEN s %% 50 = 0 THEN 'tool_call_started' ELSE 'user_message' END, 2, "
            "  %s::timestamptz - ((%s - s) * interval '1 second') - (r %% 1440) * interval '1 minute', "
            "  CASE WHEN s = 1 THEN json_build_object('run_id', 'bench-' || r) "
            "       WHEN s %% 50 = 0 THEN json_build_object('call_id', 'c' || s, 'name', 'post_correction', 'arguments', json_build_object('tenant', 't' || (r %% 20), 'account', '4020', 'amount', '840.00'), 'idempotency_key', md5(r || '|' || s)) "
            "       ELSE json_build_object('content', 'message ' || s) END, 1, now() "
            "FROM generate_series(1, %s) r, generate_series(1, %s) s",
            [now, per_run, runs, per_run],
        )
    _load_calls_sql(runs, per_run, calls, now)


def _load_calls_sql(runs: int, per_run: int, calls: int, now) -> None:
    from recovery.models import UncertainCall

    rows = []
    for r in range(1, runs + 1):
        for k in range(calls):
            seq = 50 * (k + 1)
            tool, risk = TOOLS[(r + k) % len(TOOLS)]
            started = now - timedelta(minutes=(r % 1440)) - timedelta(seconds=per_run - seq)
            overdue = (r * calls + k) % 100 == 0
            rows.append(
                UncertainCall(
                    run_id=f"bench-{r}", call_id=f"c{seq}", idempotency_key=f"k{r}-{seq}", tool=tool,
                    arguments={"tenant": f"t{r % 20}", "account": "4020", "amount": "840.00"}, tenant=f"t{r % 20}",
                    start_seq=seq, started_at=started, state=("open", "reconciling", "escalated")[k % 3], uncertain_seq=seq,
                    risk_class=risk, deadline=(now - timedelta(minutes=5)) if overdue else (now + timedelta(days=2)),
                    possible_duplicate=(r * calls + k) % 997 == 0, last_outcome="unavailable", attempts=1, version=1,
                )
            )
            if len(rows) >= 5000:
                UncertainCall.objects.bulk_create(rows)
                rows = []
    UncertainCall.objects.bulk_create(rows)


def _load_generic(runs: int, per_run: int, calls: int, now) -> None:
    from runs.models import Event, Run

    Run.objects.bulk_create([Run(run_id=f"bench-{r}", origin="import", last_seq=per_run, lease_epoch=1) for r in range(1, runs + 1)])
    batch = []
    for r in range(1, runs + 1):
        for s in range(1, per_run + 1):
            ts = now - timedelta(minutes=(r % 1440)) - timedelta(seconds=per_run - s)
            if s == 1:
                t, p = "run_started", {"run_id": f"bench-{r}"}
            elif s % 50 == 0:
                t, p = "tool_call_started", {"call_id": f"c{s}", "name": "post_correction", "arguments": {"tenant": f"t{r % 20}", "account": "4020", "amount": "840.00"}, "idempotency_key": f"k{r}-{s}"}
            else:
                t, p = "user_message", {"content": f"message {s}"}
            batch.append(Event(run_id=f"bench-{r}", seq=s, type=t, v=2, ts=ts, payload=p, epoch=1))
            if len(batch) >= 5000:
                Event.objects.bulk_create(batch)
                batch = []
    Event.objects.bulk_create(batch)
    _load_calls_sql(runs, per_run, calls, now)


def _time(client: Client, urls: list[str], n: int) -> dict:
    samples = []
    for i in range(n):
        url = urls[i % len(urls)]
        t0 = time.perf_counter()
        resp = client.get(url)
        samples.append((time.perf_counter() - t0) * 1000)
        if resp.status_code != 200:
            raise RuntimeError(f"GET {url} answered {resp.status_code}")
    samples.sort()
    return {"p50_ms": round(statistics.median(samples), 1), "p95_ms": round(samples[int(0.95 * (len(samples) - 1))], 1)}


def _queries(client: Client, url: str) -> int:
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(url).status_code == 200
    return len(ctx.captured_queries)


def bench_console(*, quick: bool, out) -> dict:
    from django.contrib.auth.models import User

    from access.roles import roles_ensure
    from recovery.models import ToolPolicy, UncertainCall

    size = SIZES[quick]
    now = timezone.now()
    t0 = time.perf_counter()
    if connection.vendor == "postgresql":
        _load_pg(size["runs"], size["events_per_run"], size["calls_per_run"], now)
        with connection.cursor() as c:
            # What autovacuum does to a loaded table in production: statistics, and the
            # visibility map that lets the covering partial indexes answer without the heap.
            c.execute("VACUUM (ANALYZE) reckon_uncertain_call")
            c.execute("ANALYZE")
    else:
        _load_generic(size["runs"], size["events_per_run"], size["calls_per_run"], now)
    load_s = time.perf_counter() - t0
    roles_ensure()
    # The account is sensitive, as in production: every screen then pays for masking by key and by
    # value (the screens mask for everyone and offer "reveal" instead).
    ToolPolicy.objects.create(tool="post_correction", risk_class="irreversible", strategy="escalate", sensitive_fields=["account"])
    admin = User.objects.create_superuser("bench-admin", password=None)
    client = Client()
    client.force_login(admin)
    pks = list(UncertainCall.objects.order_by("?").values_list("pk", flat=True)[:50])
    n = 200
    figures = {
        "engine": connection.vendor,
        "events": size["runs"] * size["events_per_run"],
        "open_uncertain_calls": UncertainCall.objects.count(),
        "load_s": round(load_s, 1),
        "requests_per_page": n,
        "queue": _time(client, ["/queue/", "/queue/?risk_class=irreversible", "/queue/?tenant=t3"], n),
        "overview": _time(client, ["/overview/"], n),
        "approval": _time(client, [f"/calls/{pk}/" for pk in pks], n),
        "queries": {
            "queue_25": _queries(client, "/queue/?limit=25"),
            "queue_200": _queries(client, "/queue/?limit=200"),
            "overview": _queries(client, "/overview/"),
            "approval": _queries(client, f"/calls/{pks[0]}/"),
        },
    }
    if out is not None:
        out.write(f"console on {figures['engine']}: {figures['events']:,} events, {figures['open_uncertain_calls']:,} open uncertain calls (loaded in {figures['load_s']} s)")
        for page in ("queue", "overview", "approval"):
            out.write(f"  {page:<9} p50 {figures[page]['p50_ms']:>7} ms   p95 {figures[page]['p95_ms']:>7} ms   ({n} requests)")
        q = figures["queries"]
        out.write(f"  queries: queue {q['queue_25']} at 25 per page, {q['queue_200']} at 200 per page; overview {q['overview']}; approval {q['approval']}")
    return figures
