"""``manage.py bench console``: server time of the queue, the overview, the approval screen, the
search, the navigation's open-call badge, the decision log and the runs list.

The data is loaded in bulk, straight into the tables (the suite runs in a throwaway database): runs
of ``events_per_run`` events with ``calls_per_run`` open uncertain calls each, about 1% of them past
their deadline. Each page is requested 200 times through Django's test client, in process, signed in
as an administrator; p50 and p95 are reported per page, plus the number of SQL queries each page
makes at two page sizes, which must not grow with the page size.

On PostgreSQL, last, the bench's calls become a settled 90 days (999 in 1,000 resolved) and the
reports screen is timed at the size its target names: the page, each of the three tables it loads
after it, and the whole screen (the page, then the three at once, as a browser asks for them).
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta

from django.db import connection, connections
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from console.views_reports import DEFERRED

REPORT_REQUESTS = 30
SIZES = {
    True: {"runs": 200, "events_per_run": 500, "calls_per_run": 10},  # 100,000 events, 2,000 calls
    False: {"runs": 10_000, "events_per_run": 500, "calls_per_run": 10},  # 5,000,000 events, 100,000 calls
}
def SEARCHES(runs: int) -> list[str]:
    r = max(1, runs * 47 // 100)
    return [f"k{r}-", "c450", f"bench-{r}", f"TKT-{r}", "840.00"]


TOOLS = (("post_correction", "irreversible"), ("issue_refund", "reversible"), ("read_ledger", "read_only"), ("create_ticket", "idempotent"))


def _load_pg(runs: int, per_run: int, calls: int, now) -> None:
    assert per_run >= 50 * calls, "each call starts at a multiple of 50"
    """Bulk load on PostgreSQL with generate_series: minutes instead of hours for 5M events."""
    with connection.cursor() as c:
        c.execute(
            "INSERT INTO reckon_run (run_id, origin, source_file, created_at, last_seq, lease_epoch, lease_holder) SELECT 'bench-' || r, 'import', '', now(), %s, 1, '' FROM generate_series(1, %s) r",
            [per_run, runs],
        )
        c.execute(
            "INSERT INTO reckon_event (run_id, seq, type, v, ts, payload, epoch, recorded_at) "
            "SELECT 'bench-' || r, s, CASE WHEN s = 1 THEN 'run_started' WHEN s %% 50 = 0 THEN 'tool_call_started' WHEN s = 499 THEN 'approval_decided' ELSE 'user_message' END, 2, "
            "  %s::timestamptz - ((%s - s) * interval '1 second') - (r %% 1440) * interval '1 minute', "
            "  CASE WHEN s = 1 THEN json_build_object('run_id', 'bench-' || r) "
            "       WHEN s %% 50 = 0 THEN json_build_object('call_id', 'c' || s, 'name', 'post_correction', 'arguments', json_build_object('tenant', 't' || (r %% 20), 'account', '4020', 'amount', '840.00'), 'idempotency_key', md5(r || '|' || s)) "
            "       WHEN s = 499 THEN json_build_object('call_id', 'c450', 'idempotency_key', 'k' || r || '-450', 'approved', true, 'decision', 'happened', 'by', 'bench-oncall', 'reason', 'seen in the ledger', 'evidence_ref', 'TKT-' || r) "
            "       ELSE json_build_object('content', 'message ' || s) END, 1, now() "
            "FROM generate_series(1, %s) r, generate_series(1, %s) s",
            [now, per_run, runs, per_run],
        )
    load_calls_sql(runs, per_run, calls, now)


def load_calls_sql(runs: int, per_run: int, calls: int, now, *, first: int = 1) -> None:
    from recovery.models import UncertainCall

    rows = []
    for r in range(first, first + runs):
        for k in range(calls):
            seq = 50 * (k + 1)
            tool, risk = TOOLS[(r + k) % len(TOOLS)]
            started = now - timedelta(minutes=(r % 1440)) - timedelta(seconds=per_run - seq)
            overdue = (r * calls + k) % 100 == 0
            rows.append(
                UncertainCall(
                    run_id=f"bench-{r}",
                    call_id=f"c{seq}",
                    idempotency_key=f"k{r}-{seq}",
                    tool=tool,
                    arguments={"tenant": f"t{r % 20}", "account": "4020", "amount": "840.00"},
                    tenant=f"t{r % 20}",
                    start_seq=seq,
                    started_at=started,
                    state=("open", "reconciling", "escalated")[k % 3],
                    uncertain_seq=seq,
                    risk_class=risk,
                    deadline=(now - timedelta(minutes=5)) if overdue else (now + timedelta(days=2)),
                    possible_duplicate=(r * calls + k) % 997 == 0,
                    last_outcome="unavailable",
                    attempts=1,
                    version=1,
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
                t, p = (
                    "tool_call_started",
                    {"call_id": f"c{s}", "name": "post_correction", "arguments": {"tenant": f"t{r % 20}", "account": "4020", "amount": "840.00"}, "idempotency_key": f"k{r}-{s}"},
                )
            elif s == 499:
                t, p = "approval_decided", {"call_id": "c450", "idempotency_key": f"k{r}-450", "approved": True, "decision": "happened", "by": "bench-oncall", "reason": "seen in the ledger", "evidence_ref": f"TKT-{r}"}
            else:
                t, p = "user_message", {"content": f"message {s}"}
            batch.append(Event(run_id=f"bench-{r}", seq=s, type=t, v=2, ts=ts, payload=p, epoch=1))
            if len(batch) >= 5000:
                Event.objects.bulk_create(batch)
                batch = []
    Event.objects.bulk_create(batch)
    load_calls_sql(runs, per_run, calls, now)


def _load_history_pg(n: int, now) -> int:
    """``n`` resolved calls of runs ``hist-<i>`` over the last 30 days (their events are not
    needed by any plan), one full row in flight per 1,000 of them (flagged possible duplicates) and
    one narrow one per 1,000; then the statistics autovacuum would gather."""
    tools = ", ".join(f"'{t}'" for t, _ in TOOLS)
    risks = ", ".join(f"'{r}'" for _, r in TOOLS)
    with connection.cursor() as c:
        c.execute(
            "INSERT INTO reckon_uncertain_call (run_id, call_id, idempotency_key, tool, arguments, tenant, start_seq, started_at, start_epoch,"
            " state, uncertain_seq, uncertain_reason, risk_class, unclassified, deadline, possible_duplicate, disposition, resolved_by, resolved_seq,"
            " resolution_kind, last_outcome, last_rule, last_error, attempts, outcomes_match, outcomes_absent, outcomes_conflict, outcomes_unavailable,"
            " escalation_reason, approval_pending, escalated_at, claimed_by_name, notes, last_seq, version, updated_at, resolved_at)"
            f" SELECT 'hist-' || (i / 10), 'c' || i, md5('h' || i), (ARRAY[{tools}])[1 + i %% 4], '{{\"tenant\": \"t3\"}}'::jsonb, 't' || (i %% 20), i %% 10 + 1,"
            "  %(now)s::timestamptz - (i %% 43200) * interval '1 minute' - interval '1 hour', 1,"
            "  CASE WHEN i %% 1000 = 0 THEN 'in_flight' ELSE 'resolved' END, i %% 10 + 2, 'bench', (ARRAY[{risks}])[1 + i %% 4], false,"
            "  %(now)s::timestamptz - (i %% 43200) * interval '1 minute' + interval '1 day', i %% 1000 = 0,"
            "  CASE WHEN i %% 1000 = 0 THEN '' ELSE 'completed' END, '', i %% 10 + 3, CASE WHEN i %% 1000 = 0 THEN '' WHEN i %% 3 = 0 THEN 'person' ELSE 'automatic' END,"
            "  'match', '', '', 1, 1, 0, 0, 0, '', false, CASE WHEN i %% 3 = 0 THEN %(now)s::timestamptz - (i %% 43200) * interval '1 minute' END, '', 0, i %% 10 + 3, 2,"
            "  %(now)s::timestamptz - (i %% 43200) * interval '1 minute',"
            "  CASE WHEN i %% 1000 = 0 THEN NULL ELSE %(now)s::timestamptz - (i %% 43200) * interval '1 minute' END"
            " FROM generate_series(1, %(n)s) i".replace("{tools}", tools).replace("{risks}", risks),
            {"now": now, "n": n},
        )
        # Calls in flight are kept on their run's row (Run.in_flight, read through the view
        # reckon_in_flight_call): one run per call, its start at seq 1.
        c.execute(
            "INSERT INTO reckon_run (run_id, origin, source_file, created_at, last_seq, lease_epoch, lease_holder, in_flight)"
            " SELECT 'flying-' || i, 'live', '', %(now)s, 1, 1, 'bench', jsonb_build_object('c1', jsonb_build_object("
            "  's', 1, 'i', nextval(pg_get_serial_sequence('reckon_uncertain_call', 'id')), 'c', 'c1', 'k', md5('f' || i), 't', 'issue_refund',"
            "  'n', 't' || (i %% 20), 'a', %(now)s::timestamptz, 'e', 1))"
            " FROM generate_series(1, %(n)s) i",
            {"now": now, "n": max(1, n // 1000)},
        )
        c.execute("VACUUM (ANALYZE) reckon_uncertain_call")
    return n


def _p(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return round(ordered[int(q * (len(ordered) - 1))], 1)


def _time(client: Client, urls: list[str], n: int, headers: dict | None = None) -> dict:
    """p50 and p95 over all ``n`` requests (the URLs taken in turn), and each URL's own, so that a
    slow filter is not hidden by fast ones."""
    samples: list[float] = []
    by_url: dict[str, list[float]] = {u: [] for u in urls}
    for i in range(n):
        url = urls[i % len(urls)]
        t0 = time.perf_counter()
        resp = client.get(url, headers=headers)
        ms = (time.perf_counter() - t0) * 1000
        samples.append(ms)
        by_url[url].append(ms)
        if resp.status_code != 200:
            raise RuntimeError(f"GET {url} answered {resp.status_code}")
    figures = {"p50_ms": _p(samples, 0.5), "p95_ms": _p(samples, 0.95)}
    if 1 < len(urls) <= 10:  # a page's filters; not the approval screen's fifty calls
        figures["by_url"] = {u: {"p50_ms": _p(s, 0.5), "p95_ms": _p(s, 0.95)} for u, s in by_url.items() if s}
    return figures


def _say_by_url(out, page: dict) -> None:
    for url, f in page.get("by_url", {}).items():
        out.write(f"      {url[:60]:<60} p50 {f['p50_ms']:>7} ms   p95 {f['p95_ms']:>7} ms")


def _queries(client: Client, url: str) -> int:
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(url).status_code == 200
    return len(ctx.captured_queries)


def _history_figures(client: Client, figures: dict, pk, now, n: int, out) -> None:
    """PostgreSQL: the queue and the reports over a settled history, and the queue's plans."""
    # Planned after the timing, on a table that also holds what production's does: a resolved
    # history four times the open calls, and calls in flight in both tables.
    figures["history_rows"] = _load_history_pg(4 * figures["open_uncertain_calls"], now)
    # The queue over the settled history too: "resolved" and "all", and "mine" and "unassigned".
    figures["queue_history"] = _time(client, ["/queue/?state=resolved", "/queue/?state=all", "/queue/?state=all&tenant=t3", "/queue/?view=mine", "/queue/?view=unassigned"], n)
    # The reports over that history too (five times the calls the target names, four in five
    # resolved): the statements that rank resolution times then rank every resolved call
    # (docs/gaps.md, "The reports' percentiles").
    figures["reports_history"] = _time(client, ["/reports/?days=90", "/reports/?days=30&risk_class=irreversible"], REPORT_REQUESTS // 3)
    if out is not None:
        out.write(f"  queue over {figures['history_rows']:,} settled calls (resolved, all, mine, unassigned): p50 {figures['queue_history']['p50_ms']} ms   p95 {figures['queue_history']['p95_ms']} ms")
        _say_by_url(out, figures["queue_history"])
        out.write(f"  reports over them ({REPORT_REQUESTS // 3} requests): p50 {figures['reports_history']['p50_ms']} ms   p95 {figures['reports_history']['p95_ms']} ms")
        _say_by_url(out, figures["reports_history"])
    figures["plans"], figures["indexes_unused"] = _plans(client, pk)


# The reports' three percentile tables, each loaded by the screen as a request of its own once the
# page has arrived (htmx, hx-trigger="load"), with the page's own query: the screen's own list.
REPORT_FRAGMENTS = tuple(DEFERRED)
HX = {"HX-Request": "true"}

# The bench's calls turned into a settled history, in place: started evenly over the report's 90
# days (from %(first)s, over %(span)s), the deadline a day after the start; 999 in 1,000 resolved
# 2 to 24 hours after the start (one in 20 of them a few minutes to 3 hours after the deadline,
# none after %(latest)s), a third of those by one of seven people, who touched the call within an
# hour and claimed it within two; the rest escalated and waiting, unclaimed. Row i is the call's
# place in id order.
SETTLE_SQL = """
WITH n AS (SELECT id, row_number() OVER (ORDER BY id) - 1 AS i, count(*) OVER () AS total FROM reckon_uncertain_call),
s AS (
  SELECT id, i, i %% 1000 = 999 AS waiting, i %% 1000 <> 999 AND i %% 3 = 0 AS person, 'person' || (i %% 7) AS who,
    %(first)s::timestamptz + %(span)s::interval * (i::float8 / total) AS start,
    CASE WHEN i %% 20 = 7 THEN interval '1 day' + (1 + i %% 180) * interval '1 minute'
         ELSE interval '2 hours' + (i * 7919 %% 1320) * interval '1 minute' END AS took
  FROM n
)
UPDATE reckon_uncertain_call uc SET
  started_at = s.start, deadline = s.start + interval '1 day',
  state = CASE WHEN s.waiting THEN 'escalated' ELSE 'resolved' END,
  disposition = CASE WHEN s.waiting THEN '' ELSE 'completed' END,
  resolution_kind = CASE WHEN s.waiting THEN '' WHEN s.person THEN 'person' ELSE 'automatic' END,
  resolved_by = CASE WHEN s.waiting THEN '' WHEN s.person THEN s.who ELSE 'bench rule' END,
  resolved_at = CASE WHEN s.waiting THEN NULL ELSE LEAST(s.start + s.took, %(latest)s::timestamptz) END,
  resolved_seq = CASE WHEN s.waiting THEN NULL ELSE uc.start_seq + 1 END,
  last_seq = uc.start_seq + CASE WHEN s.waiting THEN 0 ELSE 1 END,
  first_touch_at = CASE WHEN s.person THEN s.start + (s.i %% 60) * interval '1 minute' END,
  claimed_by_id = NULL,
  claimed_by_name = CASE WHEN s.person THEN s.who ELSE '' END,
  claimed_at = CASE WHEN s.person THEN s.start + (s.i %% 60 + s.i %% 61) * interval '1 minute' END,
  escalated_at = CASE WHEN s.waiting THEN s.start + interval '10 minutes' WHEN s.person THEN s.start + (s.i %% 60 / 2) * interval '1 minute' END,
  escalation_reason = CASE WHEN s.waiting OR s.person THEN 'policy' ELSE '' END,
  approval_pending = s.waiting,
  last_outcome = CASE WHEN s.waiting OR s.person THEN 'unavailable' ELSE 'match' END,
  attempts = CASE WHEN s.waiting OR s.person THEN 1 ELSE 2 END,
  outcomes_match = CASE WHEN s.waiting OR s.person THEN 0 ELSE 1 END,
  outcomes_unavailable = 1,
  next_attempt_at = NULL, retry_seq = NULL, version = uc.version + 1, updated_at = %(now)s
FROM s WHERE uc.id = s.id
"""


def _settle_pg(now) -> dict:
    """The bench's calls, and only they, as a settled 90 days (``SETTLE_SQL``): the shape the
    reports are asked to answer in 300 ms at (100,000 calls, mostly resolved), where the open calls
    the bench loads give the percentile statements nothing to rank. The history rows
    ``_load_history_pg`` added go first (and the calls detection made of its runs in flight).
    Returns the calls, those resolved, and those resolved after their deadline."""
    from recovery.reports import Period

    first = Period.last_days(90, now=now).start
    latest = now - timedelta(minutes=5)  # nothing resolved in the future
    with connection.cursor() as c:
        for table in ("reckon_uncertain_call", "reckon_run"):
            c.execute(f"DELETE FROM {table} WHERE run_id LIKE %s OR run_id LIKE %s", ["hist-%", "flying-%"])
        c.execute(SETTLE_SQL, {"first": first, "span": now - timedelta(hours=3) - first, "latest": latest, "now": now})
        # Rewritten, as a table that has held 100,000 calls all along would be laid out: the 400,000
        # history rows just deleted and the rows the update left behind would otherwise make each
        # report's scan of the period's calls read five times the pages.
        c.execute("VACUUM (FULL, ANALYZE) reckon_uncertain_call")
        c.execute("SELECT count(*), count(*) FILTER (WHERE state = 'resolved'), count(*) FILTER (WHERE state = 'resolved' AND resolved_at > deadline) FROM reckon_uncertain_call")
        calls, resolved, late = c.fetchone()
    return {"calls": calls, "resolved": resolved, "late": late}


def _whole_screen(client: Client, user, query: str, n: int) -> dict:
    """The reports screen as a browser gets it: the page, then, once it has arrived, its three
    tables requested at once (three threads, each with its own client and database connection, as
    a browser's three requests reach three server workers). Timed ``n`` times from the page's
    request to the last table's answer. The threads share one Python process, so their Python work
    takes turns where three server processes would not: an upper bound, not a flattering one."""
    go, done = threading.Barrier(4), threading.Barrier(4)
    ends = [0.0] * len(REPORT_FRAGMENTS)
    failures: list[BaseException] = []

    def fragment(k: int) -> None:
        try:
            own = Client()
            own.force_login(user)
            for _ in range(n):
                go.wait(timeout=600)
                resp = own.get(f"/reports/{REPORT_FRAGMENTS[k]}/?{query}", headers=HX)
                ends[k] = time.perf_counter()
                if resp.status_code != 200:
                    raise RuntimeError(f"GET /reports/{REPORT_FRAGMENTS[k]}/?{query} answered {resp.status_code}")
                done.wait(timeout=600)
        except BaseException as exc:  # handed to the main thread, which raises it
            failures.append(exc)
            go.abort()
            done.abort()
        finally:
            connections.close_all()

    threads = [threading.Thread(target=fragment, args=(k,), name=f"bench-{f}") for k, f in enumerate(REPORT_FRAGMENTS)]
    for t in threads:
        t.start()
    samples: list[float] = []
    try:
        for _ in range(n):
            t0 = time.perf_counter()
            resp = client.get(f"/reports/?{query}")
            if resp.status_code != 200:
                raise RuntimeError(f"GET /reports/?{query} answered {resp.status_code}")
            go.wait(timeout=600)
            done.wait(timeout=600)
            samples.append((max(ends) - t0) * 1000)
    except threading.BrokenBarrierError:
        raise RuntimeError(f"a table of the reports screen failed: {failures[0]!r}" if failures else "the reports screen's tables stopped") from (failures[0] if failures else None)
    finally:
        go.abort()
        done.abort()
        for t in threads:
            t.join()
    return {"p50_ms": _p(samples, 0.5), "p95_ms": _p(samples, 0.95)}


def _reports_resolved(client: Client, user, now) -> dict:
    """The reports at the size their target names (90 days, 100,000 calls; docs/reports.md) with
    999 in 1,000 calls resolved: the page, each of its three tables, and the whole screen.
    Run last, on PostgreSQL: it rewrites the bench's calls."""
    figures = _settle_pg(now)
    query = "days=90"
    figures["requests"] = REPORT_REQUESTS
    figures["page"] = _time(client, [f"/reports/?{query}"], REPORT_REQUESTS)
    for name in REPORT_FRAGMENTS:
        figures[name.replace("-", "_")] = _time(client, [f"/reports/{name}/?{query}"], REPORT_REQUESTS, headers=HX)
    figures["whole_screen"] = _whole_screen(client, user, query, REPORT_REQUESTS)
    return figures


def _reports_resolved_say(out, f: dict) -> None:
    out.write(f"  reports over {f['calls']:,} calls in 90 days, {f['resolved']:,} resolved ({f['late']:,} of them late), {f['requests']} requests each:")
    for name in ("page", *REPORT_FRAGMENTS, "whole screen"):
        t = f[name.replace("-", "_").replace(" ", "_")]
        out.write(f"    {name:<14} p50 {t['p50_ms']:>7} ms   p95 {t['p95_ms']:>7} ms")


def _figures_say(out, figures: dict, n: int) -> None:
    out.write(f"console on {figures['engine']}: {figures['events']:,} events, {figures['open_uncertain_calls']:,} open uncertain calls (loaded in {figures['load_s']} s)")
    for page in ("queue", "overview", "approval", "search", "badge", "decisions", "runs", "reports"):
        asked = REPORT_REQUESTS if page == "reports" else n
        out.write(f"  {page:<9} p50 {figures[page]['p50_ms']:>7} ms   p95 {figures[page]['p95_ms']:>7} ms   ({asked} requests)")
        _say_by_url(out, figures[page])
    q = figures["queries"]
    out.write(f"  queries: queue {q['queue_25']} at 25 per page, {q['queue_200']} at 200 per page; overview {q['overview']}; approval {q['approval']}")
    if "plans" in figures:
        out.write("  plans of the statements that read the queue table (median of 5 EXPLAIN ANALYZE):")
        for p in figures["plans"]:
            out.write(f"    {p['request']:<44} {p['ms']:>8.2f} ms  {'; '.join(dict.fromkeys(p['lines']))}")
        out.write(f"  indexes no plan uses: {', '.join(figures['indexes_unused']) or 'none'}")
    if "reports_resolved" in figures:
        _reports_resolved_say(out, figures["reports_resolved"])


def bench_console(*, quick: bool, out) -> dict:
    from django.contrib.auth.models import User

    from access.roles import roles_ensure
    from recovery.models import ToolPolicy, UncertainCall
    from recovery.recorded import recorded_rebuild

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
    # The data went straight into the tables, past the appends that keep the reports' roll-up of
    # recorded calls: derive it from the log by its own rule, as rebuild_projections does.
    recorded_rebuild()
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
        # The navigation's search: a key's prefix, a call id (in every run), a run id, an evidence
        # reference and an argument value (in every call); and the open-call badge it polls.
        "search": _time(client, [f"/search/?q={q}" for q in SEARCHES(size["runs"])], n),
        "badge": _time(client, ["/nav/open-count/"], n),
        "decisions": _time(client, ["/decisions/", "/decisions/?by=BENCH", "/decisions/?tenant=t3"], n),
        "runs": _time(client, ["/runs/", "/runs/?q=bench-47"], n),
        # The reports (docs/reports.md): 90 and 30 days, filtered by risk class, and one table's CSV.
        # Fewer requests: each reads every call of its period, grouped by the database.
        "reports": _time(client, ["/reports/?days=90", "/reports/?days=30&risk_class=irreversible", "/reports/times-by-tool.csv?days=90"], REPORT_REQUESTS),
        "queries": {
            "queue_25": _queries(client, "/queue/?limit=25"),
            "queue_200": _queries(client, "/queue/?limit=200"),
            "overview": _queries(client, "/overview/"),
            "approval": _queries(client, f"/calls/{pks[0]}/"),
        },
    }
    if connection.vendor == "postgresql":
        _history_figures(client, figures, pks[0], now, n, out)
        # Last: it rewrites the calls every figure above was taken over.
        figures["reports_resolved"] = _reports_resolved(client, admin, timezone.now())
    if out is not None:
        _figures_say(out, figures, n)
    return figures


QUEUE_FILTERS = (
    "",
    "risk_class=irreversible",
    "tenant=t3",
    "tool=issue_refund",
    "duplicate=yes",
    "min_age_m=600",
    "state=escalated&risk_class=reversible",
    "state=in_flight",
    "state=resolved",
    "state=resolved&risk_class=irreversible",
    "state=resolved&tool=issue_refund",
    "state=resolved&tenant=t3",
    "state=all",
    "view=mine",
    "view=unassigned",
)


def _plans(client: Client, pk: int) -> tuple[list[dict], list[str]]:
    """Every statement the screens, the API, /metrics and the worker send to the queue table,
    planned on this data (bench/plans.py), and the table's indexes none of them uses."""
    from access.tokens import token_create
    from bench.plans import indexes_unused, queue_plans, statement_sql_plan, statements_plans
    from recovery.detection import uncertain_calls_detect
    from recovery.reconcile import call_row_sql, due_calls
    from recovery.rows import CALL_COLUMNS
    from recovery.selectors import uncertain_call_get

    _, secret = token_create(name="bench plans", scopes=["read"])
    api = {"HTTP_AUTHORIZATION": f"Bearer {secret}"}
    plans = queue_plans(client, [(f"console /queue/?{f}", f"/queue/?{f}") for f in QUEUE_FILTERS])
    plans += queue_plans(client, [("console /overview/", "/overview/"), (f"console /calls/{pk}/", f"/calls/{pk}/"), ("console /decisions/?tool=issue_refund", "/decisions/?tool=issue_refund")])
    plans += queue_plans(client, [(f"console /search/?q={q}", f"/search/?q={q}") for q in SEARCHES(10_000)])
    plans += queue_plans(client, [("console /reports/?days=90", "/reports/?days=90")])
    api_filters = [f.replace("duplicate=yes", "possible_duplicate=true").replace("min_age_m=600", "min_age_s=36000") for f in QUEUE_FILTERS] + ["state=all", "state=all&tenant=t3"]
    plans += queue_plans(client, [(f"API /uncertain-calls?{f}", f"/api/uncertain-calls?{f}") for f in api_filters], headers=api)
    plans += queue_plans(client, [(f"API /uncertain-calls/{pk}", f"/api/uncertain-calls/{pk}"), ("/metrics", "/metrics")], headers=api)
    row = uncertain_call_get(pk=pk)
    # The statement recovery.rows.run_rows_read prepares, with a start seq named.
    run_rows_sql = f"SELECT r.in_flight, {CALL_COLUMNS.select()} FROM reckon_run r LEFT JOIN reckon_uncertain_call uc ON uc.run_id = r.run_id AND (uc.state <> %s OR uc.start_seq = ANY(%s)) WHERE r.run_id = %s"
    plans += statements_plans("worker: due calls (reconcile_scan)", lambda: list(due_calls().values_list("pk", "attempts")))
    plans += statement_sql_plan("worker: a call, its run and policy", call_row_sql(), [pk])
    plans += statement_sql_plan("projection: a run's rows", run_rows_sql, ["resolved", [row.start_seq], row.run_id])
    plans += statements_plans("detection: runs with calls in flight", lambda: uncertain_calls_detect())
    for p in plans:
        p.pop("sql")
    return plans, indexes_unused(plans)
