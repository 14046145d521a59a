"""A completion that names another call's key (docs/recovery.md), in the projection and for the
agent that resumes the run.

``started(c1, K1)``, ``started(c2, K2)``, ``completed(c2, key=K1)``: c2 is completed by call id; c1
stays uncertain with a row that says why; a resumed agent does not skip c1 until a person settles
it; the rebuilt projection equals the incremental one however the events were batched."""

from __future__ import annotations

import pytest

from recovery.decisions import decision_record
from recovery.detection import uncertain_calls_detect
from recovery.models import UncertainCall
from recovery.rebuild import projections_rebuild
from reckon_client import CallUncertain, ToolCall, open_run
from runs.client import StoreTransport
from reckon_client.identity import call_key
from runs.leases import lease_acquire, lease_release
from runs.selectors import run_state
from runs.store import NewEvent, events_append
from tests.clients.helpers import CountingTool
from tests.recovery.helpers import correction, snapshot

pytestmark = pytest.mark.django_db

C1 = correction(ref="C-771", amount="840.00")
C2 = correction(ref="C-772", amount="480.00")


def mismatched_run(run_id: str, *, batch: int) -> tuple[str, str]:
    """The agent's log, appended ``batch`` events at a time, then its process died."""
    secret = "5e" * 16  # the run's key secret, with which the agent client computed its keys
    k1, k2 = call_key(run_id, "post_correction", C1, secret), call_key(run_id, "post_correction", C2, secret)
    events = [
        NewEvent("run_started", {"run_id": run_id, "key_secret": secret}),
        NewEvent("tool_call_started", {"call_id": "c1", "name": "post_correction", "arguments": C1, "idempotency_key": k1}),
        NewEvent("tool_call_started", {"call_id": "c2", "name": "post_correction", "arguments": C2, "idempotency_key": k2}),
        NewEvent("tool_call_completed", {"call_id": "c2", "name": "post_correction", "content": {"id": "OP-2"}, "is_error": False, "idempotency_key": k1}),
    ]
    lease = lease_acquire(run_id=run_id, holder="agent-7:worker-a")
    for i in range(0, len(events), batch):
        events_append(run_id=run_id, epoch=lease.epoch, expected_seq=i, events=events[i : i + batch])
    lease_release(run_id=run_id, epoch=lease.epoch)
    uncertain_calls_detect(run_id=run_id)
    return k1, k2


@pytest.mark.parametrize("batch", [4, 1, 2, 3], ids=["one-batch", "event-by-event", "pairs", "three-then-one"])
def test_it_keeps_the_named_call_uncertain_and_flags_the_key_mismatch_on_its_row(batch):
    run_id = f"run-pin-mismatch-{batch}"
    k1, k2 = mismatched_run(run_id, batch=batch)

    (row,) = UncertainCall.objects.filter(run_id=run_id)
    assert (row.call_id, row.idempotency_key, row.state) == ("c1", k1, UncertainCall.State.OPEN)
    assert row.disposition == ""
    assert "key mismatch" in row.last_error and "c2" in row.last_error and k1 in row.last_error and k2 in row.last_error
    state = run_state(run_id=run_id)
    assert [c.call_id for c in state.uncertain_calls] == ["c1"]
    assert k1 not in state.completed_calls and state.completed_calls == {k2: {"id": "OP-2"}}


@pytest.mark.parametrize("batch", [4, 1, 2, 3], ids=["one-batch", "event-by-event", "pairs", "three-then-one"])
def test_it_rebuilds_the_mismatch_exactly_as_the_incremental_path_built_it(batch):
    mismatched_run(f"run-pin-mm-r{batch}", batch=batch)
    incremental = snapshot()
    assert incremental and all("key mismatch" in r["last_error"] for r in incremental)

    projections_rebuild()

    assert snapshot() == incremental


def test_it_never_lets_a_resumed_agent_skip_the_named_call_until_a_person_settles_it():
    run_id = "run-pin-mm-agent"
    k1, _ = mismatched_run(run_id, batch=4)
    tool = CountingTool({"id": "OP-NEW"})

    resumed = open_run(run_id, transport=StoreTransport(), holder="agent-7:worker-b", renew=False)
    try:
        with pytest.raises(CallUncertain) as raised:
            resumed.invoke(ToolCall("c9", "post_correction", C1), tool)
    finally:
        resumed.close(release=True)
    assert tool.calls == 0 and raised.value.idempotency_key == k1 and raised.value.call_id == "c1"

    row = UncertainCall.objects.get(run_id=run_id)
    decision_record(pk=row.pk, decision="happened", by="olivia.oncall", reason="the ledger shows C-771 posted", seen_version=row.version)

    resumed = open_run(run_id, transport=StoreTransport(), holder="agent-7:worker-c", renew=False)
    try:
        result = resumed.invoke(ToolCall("c10", "post_correction", C1), tool)
    finally:
        resumed.close(release=True)
    assert tool.calls == 0 and result.replayed and result.content["recorded_by"] == "olivia.oncall"
