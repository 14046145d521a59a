"""A reconciled call's row is updated inside its append's statement (``projection_rider``), from the
row the worker read with its lease: exactly what the projection's own read and update would have
written, and the projection in Python whenever the statement cannot know that."""

from __future__ import annotations

import pytest
from django.db import connection

from recovery import ownership, projection, reconcile
from recovery.models import InFlightCall, UncertainCall
from recovery.policy_changes import policy_update
from recovery.rebuild import projections_rebuild
from recovery.reconcile import calls_reconcile
from runs.leases import lease_acquire, lease_release
from runs.models import Run
from runs.store import NewEvent, events_append
from tests.recovery.helpers import correction, crashed_run, snapshot

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="riders are PostgreSQL's (SQLite always takes the Python path)"),
]

S = UncertainCall.State


@pytest.fixture
def python_path(monkeypatch):
    """Counts the projection's Python runs that a rider handed back (``then``)."""
    calls = []
    real = projection.projection_apply

    def spy(run_id, events, epoch):
        calls.append(run_id)
        return real(run_id, events, epoch)

    monkeypatch.setattr(projection, "projection_apply", spy)
    return calls


def _twins(name: str, ledger, outcome: str):
    """Two runs alike, each with one call in doubt whose lookup gives ``outcome``."""
    calls = []
    for twin in ("rider", "python"):
        args = correction(ref=f"{name}-{twin}") if outcome != "escalate" else {"tenant": "acme", "notice": f"{name}-{twin}", "recipient": "FCA"}
        tool = "notify_regulator" if outcome == "escalate" else "post_correction"
        (call,) = crashed_run(f"run-r-{name}-{twin}", [("c1", tool, args)])
        if outcome == "match":
            ledger.seed(call.idempotency_key, args)
        elif outcome == "conflict":
            ledger.seed(call.idempotency_key, {**args, "amount": "999.00"})
        elif outcome == "unavailable":
            ledger.modes[call.idempotency_key] = "unavailable"
        calls.append(call)
    return calls


_COMPARED = [f.attname for f in UncertainCall._meta.concrete_fields if f.attname not in {"id", "run_id", "call_id", "idempotency_key", "arguments", "updated_at"}]
# Each run's own clock readings, and the lookup's own duration.
_MEASURED = {"started_at", "deadline", "retry_window_closes_at", "last_attempt_at", "resolved_at", "next_attempt_at", "escalated_at", "last_lookup_ms"}


@pytest.mark.parametrize("outcome, state", [("match", S.RESOLVED), ("conflict", S.ESCALATED), ("unavailable", S.RECONCILING), ("escalate", S.ESCALATED)])
def test_the_row_the_statement_writes_is_the_row_the_python_projection_writes(policies, monkeypatch, python_path, outcome, state):
    rider, python = _twins(outcome, policies, outcome)
    read_at = rider.updated_at

    assert [r.status for r in calls_reconcile([(rider.pk, 1)])] == ["acted"]
    assert python_path == []  # written by the append's statement
    monkeypatch.setattr(ownership.Owner, "rows_read", lambda self, rows: None)  # the twin: no rows known
    assert [r.status for r in calls_reconcile([(python.pk, 1)])] == ["acted"]

    rider.refresh_from_db()
    python.refresh_from_db()
    assert rider.state == state and rider.updated_at > read_at
    for name in _COMPARED:
        a, b = getattr(rider, name), getattr(python, name)
        if name in _MEASURED:
            assert (a is None) == (b is None), name
        elif isinstance(a, str):  # an error quotes its call's own key
            assert a.replace(rider.idempotency_key, "K") == b.replace(python.idempotency_key, "K"), name
        else:
            assert a == b, name


def test_rebuilt_from_the_log_the_rows_the_statements_wrote_are_the_same(policies, python_path):
    calls = [c for outcome in ("match", "conflict", "unavailable", "escalate") for c in _twins(f"rb-{outcome}", policies, outcome)[:1]]

    assert [r.status for r in calls_reconcile([(c.pk, 1) for c in calls])] == ["acted"] * 4
    assert python_path == []
    incremental = snapshot()

    projections_rebuild()

    assert snapshot() == incremental


def test_a_policy_change_between_the_read_and_the_append_sends_the_projection_back_to_python(policies, monkeypatch, python_path):
    (call,) = crashed_run("run-r-policy", [("c1", "post_correction", correction())])
    policies.seed(call.idempotency_key, correction())
    real = reconcile.reconcile_owned

    def then_change_the_policy(owner, row, policy=None):
        result = real(owner, row, policy)
        policy_update(tool="post_correction", fields={"deadline": "45m"}, by="dana.oncall")  # moves the row's terms and version
        return result

    monkeypatch.setattr(reconcile, "reconcile_owned", then_change_the_policy)

    assert [r.status for r in calls_reconcile([(call.pk, 1)])] == ["acted"]

    assert python_path == ["run-r-policy"]
    after = UncertainCall.objects.get(pk=call.pk)
    assert (after.state, after.attempts) == (S.RESOLVED, 1)
    assert after.version == call.version + 1 + 3  # the policy's change, then attempt, completion, resolution
    assert (after.deadline - after.started_at).total_seconds() == 45 * 60


def test_a_call_in_flight_on_the_run_sends_the_projection_back_to_python(policies, python_path):
    (call,) = crashed_run("run-r-flight", [("c1", "post_correction", correction())])
    policies.seed(call.idempotency_key, correction())
    # The agent came back, started another call and went away again before detection saw it.
    lease = lease_acquire(run_id="run-r-flight", holder="agent-7:worker-b")
    events_append(
        run_id="run-r-flight",
        epoch=lease.epoch,
        expected_seq=lease.last_seq,
        events=[NewEvent("tool_call_started", {"call_id": "c2", "name": "read_ledger", "arguments": {"tenant": "acme", "account": "1"}})],
    )
    lease_release(run_id="run-r-flight", epoch=lease.epoch)
    assert Run.objects.get(run_id="run-r-flight").in_flight is not None

    assert [r.status for r in calls_reconcile([(call.pk, 1)])] == ["acted"]

    assert python_path == ["run-r-flight"]
    assert UncertainCall.objects.get(pk=call.pk).state == S.RESOLVED
    assert list(InFlightCall.objects.filter(run_id="run-r-flight").values_list("call_id", flat=True)) == ["c2"]


def test_another_call_in_doubt_on_the_run_sends_the_projection_back_to_python(policies, python_path):
    # Two starts of one action: the resolution of the first closes the second too, which only the
    # projection's own read of the run's rows can know.
    first, second = crashed_run("run-r-same", [("c1", "post_correction", correction()), ("c2", "post_correction", correction())])
    policies.seed(first.idempotency_key, correction())

    assert [r.status for r in calls_reconcile([(first.pk, 1)])] == ["acted"]

    assert python_path == ["run-r-same"]
    assert set(UncertainCall.objects.filter(run_id="run-r-same").values_list("state", flat=True)) == {S.RESOLVED}
