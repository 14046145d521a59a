"""The append path's cost with notification routes loaded (``bench store --routes``).

An escalation appended while routes are loaded makes the outbox projector read the routes and
write one row per level-1 channel in the append's transaction. Windows with routes and windows
without (no routes at all: the projector returns after one query) are taken in turn, each appending
``approval_requested`` about an uncertain call, so the machine's drift reaches both alike. Delivery
is off: the workers' sending is not the append's cost.
"""

from __future__ import annotations

import logging
import statistics
import time

from django.db import connection
from django.test.utils import override_settings

from notify.config import notifications_load
from notify.models import Route
from notify.outbox import routes_forget
from runs.leases import lease_acquire
from runs.pg import round_trips_count
from runs.store import NewEvent, events_append

ROUTES = """
[channels.bench-hook]
kind = "webhook"
url = "http://127.0.0.1:9/hooks"
secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

[channels.bench-mail]
kind = "email"
to = ["oncall@example.com"]

[[routes]]
levels = [{ notify = ["bench-hook", "bench-mail"], after = "0m" }, { notify = ["bench-mail"], after = "15m" }]
"""


CALLS = 50  # uncertain calls per run, escalated in turn: a call is escalated a few times, not thousands


def _escalating_run(run_id: str):
    lease = lease_acquire(run_id=run_id, holder="bench", ttl_seconds=3600)
    events = [NewEvent("run_started", {"run_id": run_id})]
    for i in range(CALLS):
        events.append(NewEvent("tool_call_started", {"call_id": f"c{i}", "name": "bench_tool", "arguments": {"n": i}, "idempotency_key": f"{run_id}-k{i}"}))
    for i in range(CALLS):
        events.append(NewEvent("tool_call_uncertain", {"call_id": f"c{i}", "idempotency_key": f"{run_id}-k{i}", "start_seq": i + 2, "reason": "bench"}))
    events_append(run_id=run_id, epoch=lease.epoch, expected_seq=0, events=events)
    at = {"seq": len(events), "n": 0}

    def escalate() -> int:
        i = at["n"] % CALLS
        payload = {"call_id": f"c{i}", "idempotency_key": f"{run_id}-k{i}", "start_seq": i + 2, "question": "did it happen?", "reason": "conflict"}
        events_append(run_id=run_id, epoch=lease.epoch, expected_seq=at["seq"], events=[NewEvent("approval_requested", payload)])
        at["seq"] += 1
        at["n"] += 1
        return 1

    return escalate


def bench_notify_routes(*, seconds: float, windows: int) -> dict:
    """Escalation appends per second with and without routes, median of alternating windows."""
    rates: dict[str, list[float]] = {"with_routes": [], "without_routes": []}
    fns = {"with_routes": _escalating_run("bench-esc-routes"), "without_routes": _escalating_run("bench-esc-plain")}
    # The recovery decision log writes a line per escalation: measured alike on both sides, but
    # printing thousands of them would bury the figures.
    logging.getLogger("reckon.recovery.decisions").setLevel(logging.WARNING)
    with override_settings(RECKON_NOTIFY_DELIVER_ON_COMMIT=False):
        for _ in range(windows):
            for name, fn in fns.items():
                if name == "with_routes":
                    notifications_load(text=ROUTES, by="bench")
                else:
                    Route.objects.all().delete()
                    routes_forget()
                n, t0 = 0, time.perf_counter()
                deadline = t0 + seconds
                while time.perf_counter() < deadline:
                    n += fn()
                rates[name].append(n / (time.perf_counter() - t0))
        trips = _round_trips(fns) if connection.vendor == "postgresql" else {}
    with_r, without = statistics.median(rates["with_routes"]), statistics.median(rates["without_routes"])
    figures = {"escalation_append_with_routes_per_s": round(with_r, 1), "escalation_append_without_routes_per_s": round(without, 1), "routes_vs_none": round(with_r / without, 3)}
    if trips:
        figures.update(round_trips_with_routes=trips["with_routes"], round_trips_without_routes=trips["without_routes"])
    return figures


def _round_trips(fns: dict) -> dict[str, float]:
    """Round trips per escalation append with routes and without (libpq's trace, 20 appends each),
    everything the append sends included: the transaction, the projectors, the decision log's reads."""
    trips = {}
    for name, fn in fns.items():
        if name == "with_routes":
            notifications_load(text=ROUTES, by="bench")
        else:
            Route.objects.all().delete()
            routes_forget()
        fn()  # the statements of this configuration prepared
        trips[name] = round_trips_count(lambda: [fn() for _ in range(20)]) / 20
    return trips
