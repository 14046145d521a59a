"""Every adapter lookup is timed: the duration goes into the attempt's evidence in the log, the
call's row keeps the latest one and its attempts per outcome, and /metrics exports both."""

from __future__ import annotations

import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from recovery.adapters import Evidence
from recovery.models import UncertainCall
from recovery.policy_changes import policies_load
from recovery.rebuild import projections_rebuild
from recovery.reconcile import call_reconcile
from runs.store import events_read
from tests.recovery.helpers import crashed_run

pytestmark = pytest.mark.django_db(transaction=True)

# What the slow receiver answers next, per idempotency key; it always takes at least SLOW_S.
ANSWERS: dict[str, list[str]] = {}
SLOW_S = 0.03


def slow_lookup(*, call, spec, kind):
    time.sleep(SLOW_S)
    outcome = ANSWERS[call.idempotency_key].pop(0)
    if outcome == "match":
        return Evidence("match", observed=dict(call.arguments), raw="{}", status=200)
    return Evidence("unavailable", error="receiver busy", status=503)


POLICIES = """
[tools.refund_card]
risk_class = "reversible"
strategy   = "escalate"
deadline   = "1h"
lookup = { adapter = "python", path = "tests.recovery.test_lookup_timing.slow_lookup" }

[tools.send_note]
risk_class = "read_only"
strategy   = "escalate"
deadline   = "1h"
"""


def attempts(run_id: str) -> list[dict]:
    return [e.payload for e in events_read(run_id=run_id) if e.type == "reconciliation_attempted"]


def samples(text: str) -> dict:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in text_string_to_metric_families(text) for s in f.samples}


def test_a_lookup_is_timed_into_its_evidence_and_the_calls_row_keeps_the_latest(reader):
    policies_load(text=POLICIES, by="dana.oncall")
    (call,) = crashed_run("run-slow", [("c1", "refund_card", {"tenant": "acme", "card": "4242", "amount": 12})])
    ANSWERS[call.idempotency_key] = ["unavailable", "match"]

    assert call_reconcile(pk=call.pk).outcome == "unavailable"
    first = attempts("run-slow")[-1]["evidence"]["duration_ms"]
    assert first >= SLOW_S * 1000
    call.refresh_from_db()
    assert call.last_lookup_ms == first
    assert (call.outcomes_unavailable, call.outcomes_match) == (1, 0)

    assert call_reconcile(pk=call.pk).outcome == "match"
    second = attempts("run-slow")[-1]["evidence"]["duration_ms"]
    call.refresh_from_db()
    assert call.last_lookup_ms == second >= SLOW_S * 1000
    assert (call.outcomes_unavailable, call.outcomes_match, call.state) == (1, 1, "resolved")

    # The figures are facts of the log: a rebuild of the read model finds the same ones.
    projections_rebuild()
    rebuilt = UncertainCall.objects.get(run_id="run-slow")
    assert (rebuilt.last_lookup_ms, rebuilt.outcomes_unavailable, rebuilt.outcomes_match) == (second, 1, 1)

    m = samples(reader.get("/metrics").content.decode())
    assert m[("reckon_lookup_latency_ms_count", (("risk_class", "reversible"),))] == 1
    assert m[("reckon_lookup_latency_ms_sum", (("risk_class", "reversible"),))] == pytest.approx(second)
    assert m[("reckon_lookup_latency_ms_bucket", (("le", "+Inf"), ("risk_class", "reversible")))] == 1
    assert m[("reckon_lookup_latency_ms_bucket", (("le", "5.0"), ("risk_class", "reversible")))] == 0  # it slept 30 ms
    assert m[("reckon_lookup_latency_max_ms", (("risk_class", "reversible"), ("tool", "refund_card")))] == pytest.approx(second)
    assert m[("reckon_lookup_latency_mean_ms", (("risk_class", "reversible"), ("tool", "refund_card")))] == pytest.approx(second)
    assert m[("reckon_reconciliation_outcomes_total", (("outcome", "unavailable"),))] == 1
    assert m[("reckon_reconciliation_outcomes_total", (("outcome", "match"),))] == 1
    assert m[("reckon_reconciliation_outcomes_total", (("outcome", "conflict"),))] == 0


def test_a_tool_without_a_lookup_hook_records_no_lookup_time():
    policies_load(text=POLICIES, by="dana.oncall")
    (call,) = crashed_run("run-nohook", [("c1", "send_note", {"tenant": "acme", "text": "hi"})])
    call_reconcile(pk=call.pk)
    assert "duration_ms" not in attempts("run-nohook")[-1]["evidence"]
    call.refresh_from_db()
    assert call.last_lookup_ms is None and call.attempts == 1
