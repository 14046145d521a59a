"""``/metrics`` in the Prometheus text format: figures read from the database at scrape time, and
the replay measurements every process keeps in memory.

Database figures: a custom collector rather than counters in process memory, because appends
happen in gunicorn workers, Celery workers and agents writing through the store directly, and only
the database sees them all. Each is derived from a durable table (the runs' fence rows, the lease
log, the recovery read model), so any process answers a scrape with the same numbers and a restart
resets nothing.

Replay measurements (``runs.measurements``): a replay is a read, so its figures are never written
to the database. Each process records them with prometheus_client; in multiprocess mode
(``PROMETHEUS_MULTIPROC_DIR``) the worker answering the scrape merges every process's files, so
the figures are the host's, not one worker's. They restart from zero when the folder is cleaned.

Access: a token with the ``read`` scope or a signed-in console user with read access. Wrong tokens
count toward the API's limit on failed tokens per address (api/throttles.py): one count, one 429.
"""

from __future__ import annotations

import logging
import math
import time

from django.db.models import Count, Sum
from django.http import HttpRequest, HttpResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import CollectorRegistry, CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from access.tokens import principal_for_user
from api.auth import token_principal
from api.throttles import TooManyRequests
from notify.metrics import notify_families
from runs.measurements import collectors as process_collectors

log = logging.getLogger("reckon.metrics")


def _runs():
    from runs.models import LeaseRecord, Run

    appended = CounterMetricFamily("reckon_events_appended", "Events appended to run logs, by how the run was written", labels=["origin"])
    for row in Run.objects.values("origin").annotate(n=Sum("last_seq")):
        appended.add_metric([row["origin"]], float(row["n"] or 0))
    yield appended

    runs = GaugeMetricFamily("reckon_runs", "Runs by state", labels=["state"])
    total = Run.objects.count()
    finished = Run.objects.filter(finished_seq__isnull=False).count()
    runs.add_metric(["finished"], finished)
    runs.add_metric(["unfinished"], total - finished)
    yield runs

    kinds = {row["kind"]: row["n"] for row in LeaseRecord.objects.values("kind").annotate(n=Count("id"))}
    yield CounterMetricFamily("reckon_fencing_rejections", "Appends and renewals refused by the fence (stale epoch, seq conflict, second finish)", value=kinds.get("fenced", 0))
    leases = CounterMetricFamily("reckon_lease_events", "Lease acquisitions, takeovers, releases, refusals and fencings", labels=["kind"])
    for kind in LeaseRecord.Kind.values:
        leases.add_metric([kind], kinds.get(kind, 0))
    yield leases


def _recovery():
    """Queue figures per risk class from recovery.selectors (the same numbers as the overview)."""
    from recovery.models import UncertainCall
    from recovery.selectors import queue_figures_by_risk, uncertain_calls_count_by_state

    figures = queue_figures_by_risk(overdue_limit=1)  # the counts, not every overdue row
    opened = CounterMetricFamily("reckon_uncertain_calls_opened", "Tool calls that became uncertain", labels=["risk_class"])
    auto = CounterMetricFamily("reckon_uncertain_calls_reconciled_automatically", "Uncertain calls settled by reconciliation without a person", labels=["risk_class"])
    escalated = CounterMetricFamily("reckon_uncertain_calls_escalated", "Uncertain calls escalated to a person", labels=["risk_class"])
    still_open = GaugeMetricFamily("reckon_uncertain_calls_open", "Uncertain calls not yet resolved", labels=["risk_class"])
    oldest = GaugeMetricFamily("reckon_uncertain_call_oldest_age_seconds", "Age of the oldest unresolved uncertain call (0: none)", labels=["risk_class"])
    overdue = GaugeMetricFamily("reckon_uncertain_calls_overdue", "Unresolved uncertain calls past their recovery deadline", labels=["risk_class"])
    for risk, f in sorted(figures.items()):
        opened.add_metric([risk], f["opened"])
        auto.add_metric([risk], f["reconciled_automatically"])
        escalated.add_metric([risk], f["escalated"])
        still_open.add_metric([risk], f["still_open"])
        oldest.add_metric([risk], f["oldest_age_s"] or 0.0)
        overdue.add_metric([risk], f["overdue_count"])
    yield from (opened, auto, escalated, still_open, oldest, overdue)
    yield GaugeMetricFamily(
        "reckon_overdue_irreversible_calls",
        "Irreversible uncertain calls past their deadline: page someone",
        value=figures.get("irreversible", {}).get("overdue_count", 0),
    )

    # Outcomes per call from the read model (its latest attempt), not a scan of the event table:
    # a scrape must stay cheap on a log of millions of events.
    outcomes = GaugeMetricFamily("reckon_reconciliation_last_outcome", "Uncertain calls by the outcome of their latest lookup", labels=["outcome"])
    for row in UncertainCall.objects.exclude(last_outcome="").values("last_outcome").annotate(n=Count("id")):
        outcomes.add_metric([row["last_outcome"]], row["n"])
    yield outcomes
    attempts = UncertainCall.objects.aggregate(n=Sum("attempts"))["n"] or 0
    yield CounterMetricFamily("reckon_reconciliation_attempts", "Reconciliation attempts made", value=attempts)
    states = GaugeMetricFamily("reckon_uncertain_calls_by_state", "Tool calls by state, calls in flight included wherever they are held", labels=["state"])
    for state, n in uncertain_calls_count_by_state().items():
        states.add_metric([state], n)
    yield states
    yield from _lookup_latency()


LOOKUP_BUCKETS_MS = (5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000)


def _lookup_latency():
    """Lookup latency and reconciliation outcomes from the recovery read model, aggregated in SQL.

    Each call's row keeps its latest lookup's duration (``last_lookup_ms``, from the evidence of
    its latest attempt) and its attempts counted per outcome, so a scrape costs three grouped
    queries over the calls, never a scan of the event log.
    """
    from django.db.models import Avg, F, Max, Q

    from recovery.models import UncertainCall

    timed = UncertainCall.objects.filter(last_lookup_ms__isnull=False)
    buckets = {f"le{b}": Count("id", filter=Q(last_lookup_ms__lte=b)) for b in LOOKUP_BUCKETS_MS}
    h = HistogramMetricFamily("reckon_lookup_latency_ms", "Latest adapter lookup duration per uncertain call, in milliseconds", labels=["risk_class"])
    for row in timed.values("risk_class").annotate(n=Count("id"), total=Sum("last_lookup_ms"), **buckets).order_by("risk_class"):
        h.add_metric(
            [row["risk_class"]],
            [(str(float(b)), float(row[f"le{b}"])) for b in LOOKUP_BUCKETS_MS] + [("+Inf", float(row["n"]))],
            sum_value=float(row["total"] or 0.0),
        )
    yield h
    peak = GaugeMetricFamily("reckon_lookup_latency_max_ms", "Slowest latest lookup among a tool's uncertain calls, in milliseconds", labels=["tool", "risk_class"])
    mean = GaugeMetricFamily("reckon_lookup_latency_mean_ms", "Mean latest lookup duration of a tool's uncertain calls, in milliseconds", labels=["tool", "risk_class"])
    for row in timed.values("tool", "risk_class").annotate(peak=Max("last_lookup_ms"), mean=Avg("last_lookup_ms")).order_by("tool", "risk_class"):
        peak.add_metric([row["tool"], row["risk_class"]], float(row["peak"]))
        mean.add_metric([row["tool"], row["risk_class"]], float(row["mean"]))
    yield from (peak, mean)

    outcomes = ("match", "absent", "conflict", "unavailable")
    sums = UncertainCall.objects.aggregate(**{o: Sum(F(f"outcomes_{o}")) for o in outcomes})
    counts = CounterMetricFamily("reckon_reconciliation_outcomes", "Reconciliation attempts by the outcome of their lookup", labels=["outcome"])
    for o in outcomes:
        counts.add_metric([o], float(sums[o] or 0))
    yield counts


class DatabaseCollector:
    """Reads every figure from the database on each scrape."""

    def collect(self):
        started = time.perf_counter()
        for part in (_runs, _recovery, notify_families):
            try:
                yield from part()
            except Exception:  # one broken source must not blank the whole scrape
                log.exception("metrics source %s failed", part.__name__)
        yield GaugeMetricFamily("reckon_metrics_scrape_seconds", "Time spent reading the figures", value=time.perf_counter() - started)


_registry = CollectorRegistry(auto_describe=False)
_registry.register(DatabaseCollector())
for _collector in process_collectors():  # the replay measurements of every process sharing the folder
    _registry.register(_collector)


def metrics_text() -> bytes:
    return generate_latest(_registry)


def metrics_view(request: HttpRequest) -> HttpResponse:
    """Prometheus scrape endpoint: a ``read`` token or a signed-in user with read access. A token is
    checked as the API checks it (wrong ones count toward the address's 429 limit)."""
    header = request.headers.get("Authorization", "")
    principal = None
    if header.lower().startswith("bearer "):
        try:
            principal = token_principal(request, header[7:])
        except TooManyRequests as refused:
            response = HttpResponse(f"{refused.reason}\n", status=429, content_type="text/plain")
            response["Retry-After"] = str(math.ceil(refused.wait))
            return response
    elif request.user.is_authenticated:
        principal = principal_for_user(request.user)
    if principal is None:
        response = HttpResponse("authentication required: a Bearer token with the read scope, or a signed-in session\n", status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="reckon"'
        return response
    if "read" not in principal.scopes:
        return HttpResponse("this needs the read scope\n", status=403, content_type="text/plain")
    if principal.tenants is not None:
        # Figures are totals across tenants: a tenant-limited token would learn about the others.
        return HttpResponse("metrics span every tenant: use a token without tenant limits\n", status=403, content_type="text/plain")
    return HttpResponse(metrics_text(), content_type=CONTENT_TYPE_LATEST)
