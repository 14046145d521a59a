"""``/metrics`` in the Prometheus text format, read from the database at scrape time.

A custom collector rather than counters in process memory: appends happen in gunicorn workers,
Celery workers and agents writing through the store directly, and only the database sees them
all. Every figure here is derived from a durable table (the runs' fence rows, the lease log, the
recovery read model), so any process answers a scrape with the same numbers and a restart resets
nothing.

Access: a token with the ``read`` scope or a signed-in console user with read access.
"""

from __future__ import annotations

import logging
import time

from django.db.models import Count, Sum
from django.http import HttpRequest, HttpResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import CollectorRegistry, CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from console.tokens import principal_for_token, principal_for_user, token_authenticate

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
    yield CounterMetricFamily(
        "reckon_fencing_rejections", "Appends and renewals refused by the fence (stale epoch, seq conflict, second finish)", value=kinds.get("fenced", 0)
    )
    leases = CounterMetricFamily("reckon_lease_events", "Lease acquisitions, takeovers, releases, refusals and fencings", labels=["kind"])
    for kind in LeaseRecord.Kind.values:
        leases.add_metric([kind], kinds.get(kind, 0))
    yield leases


def _recovery():
    try:
        from recovery import metrics_source  # noqa: F401  (wired in _recovery_figures)
    except ImportError:
        pass
    yield from _recovery_figures()


def _recovery_figures():
    return iter(())


def _replay():
    """Replay and snapshot measurements, when runs.snapshots publishes them."""
    source = None
    for module in ("runs.snapshots", "runs.selectors"):
        try:
            source = getattr(__import__(module, fromlist=["replay_metrics"]), "replay_metrics", None)
        except ImportError:
            continue
        if source:
            break
    if source is None:
        return
    figures = source() or {}
    for name, value in sorted(figures.items()):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        yield GaugeMetricFamily(f"reckon_replay_{name}", f"Replay/snapshot measurement {name}", value=float(value))


class DatabaseCollector:
    """Reads every figure from the database on each scrape."""

    def collect(self):
        started = time.perf_counter()
        for part in (_runs, _recovery, _replay):
            try:
                yield from part()
            except Exception:  # one broken source must not blank the whole scrape
                log.exception("metrics source %s failed", part.__name__)
        yield GaugeMetricFamily("reckon_metrics_scrape_seconds", "Time spent reading the figures", value=time.perf_counter() - started)


_registry = CollectorRegistry(auto_describe=False)
_registry.register(DatabaseCollector())


def metrics_text() -> bytes:
    return generate_latest(_registry)


def metrics_view(request: HttpRequest) -> HttpResponse:
    """Prometheus scrape endpoint: a ``read`` token or a signed-in user with read access."""
    header = request.headers.get("Authorization", "")
    principal = None
    if header.lower().startswith("bearer "):
        token = token_authenticate(secret=header[7:].strip())
        principal = principal_for_token(token) if token else None
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
