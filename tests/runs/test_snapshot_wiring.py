"""Snapshots are taken after appends that cross the interval, and resumptions use them.

Transactional tests: the after-commit hook only runs when a real commit happens.
"""

from __future__ import annotations

import pytest
from django.db import transaction
from django.test import override_settings

from runs import store
from reckon_client import open_run
from runs.client import StoreTransport
from runs.leases import lease_acquire
from runs.models import Snapshot
from runs.selectors import run_state
from runs.snapshots import snapshot_policy_set
from runs.store import NewEvent, events_append
from runs.tasks import snapshot_due
from tests.runs.helpers import more, working_run
from tests.measure import Measurements

pytestmark = pytest.mark.django_db(transaction=True)

# Small figures so a test crosses several boundaries with a few dozen events.
SMALL = override_settings(RECKON_SNAPSHOT_INTERVAL=10, RECKON_SNAPSHOT_MIN_EVENTS=20)


def snapshot_seqs(run_id: str) -> list[int]:
    return list(Snapshot.objects.filter(run_id=run_id).order_by("seq").values_list("seq", flat=True))


def test_the_boundary_check_is_integer_arithmetic_on_the_old_and_new_last_seq():
    assert snapshot_due(19, 20, 10, 20)  # reaches the minimum on a boundary
    assert snapshot_due(25, 31, 10, 20)  # a batch that steps over 30
    assert not snapshot_due(20, 29, 10, 20)  # inside one interval
    assert not snapshot_due(9, 12, 10, 20)  # crosses 10, but the run is still below the minimum
    assert not snapshot_due(0, 5000, 0, 0)  # interval 0: never


@SMALL
def test_an_append_that_crosses_the_interval_writes_a_snapshot_after_its_commit():
    measured = Measurements()
    lease = working_run("run-s", 19)
    assert snapshot_seqs("run-s") == []  # below the minimum of 20
    more("run-s", lease.epoch, 19, 1)
    assert snapshot_seqs("run-s") == [20]
    more("run-s", lease.epoch, 20, 9)
    assert snapshot_seqs("run-s") == [20]  # 29: no boundary crossed
    more("run-s", lease.epoch, 29, 4)  # one batch stepping over 30
    assert snapshot_seqs("run-s") == [20, 33]
    assert measured("snapshot_write_ms").count == 2


@SMALL
def test_an_append_rolled_back_with_its_transaction_enqueues_nothing():
    lease = working_run("run-r", 19)
    with pytest.raises(RuntimeError):
        with transaction.atomic():
            events_append(run_id="run-r", epoch=lease.epoch, expected_seq=19, events=[NewEvent("user_message", {"content": "lost"})])
            raise RuntimeError("the caller's transaction fails")
    assert snapshot_seqs("run-r") == []
    # Inside a transaction that commits, the snapshot follows the commit.
    with transaction.atomic():
        events_append(run_id="run-r", epoch=lease.epoch, expected_seq=19, events=[NewEvent("user_message", {"content": "kept"})])
        assert snapshot_seqs("run-r") == []
    assert snapshot_seqs("run-r") == [20]


@SMALL
def test_the_run_policy_decides_in_the_task_so_a_run_set_to_never_gets_no_snapshot():
    lease = working_run("run-n", 5)
    snapshot_policy_set(run_id="run-n", interval=None)
    more("run-n", lease.epoch, 5, 40)
    assert snapshot_seqs("run-n") == []


@SMALL
def test_a_failing_after_append_hook_never_fails_the_append_it_follows():
    def broken(run_id, first_seq, last_seq):
        raise RuntimeError("the broker is down")

    store.after_append_register(broken)
    try:
        lease = working_run("run-f", 3)
        events_append(run_id="run-f", epoch=lease.epoch, expected_seq=3, events=[NewEvent("user_message", {"content": "still durable"})])
    finally:
        store._AFTER_APPEND.remove(broken)
    assert run_state(run_id="run-f").last_seq == 4


@SMALL
def test_a_resumed_client_run_starts_from_the_snapshot_and_equals_the_full_replay():
    first = open_run("run-c", transport=StoreTransport(), holder="agent-1", renew=False)
    for i in range(24):
        first.append("user_message", content=f"m{i}")
    first.append("tool_call_started", call_id="c1", name="lookup", arguments={"q": 1})
    first.append("tool_call_completed", call_id="c1", name="lookup", content="ok", is_error=False)
    first.close(release=True)
    assert snapshot_seqs("run-c") == [20]
    measured = Measurements()

    resumed = open_run("run-c", transport=StoreTransport(), holder="agent-2", renew=False)
    try:
        assert resumed.state.to_dict() == run_state(run_id="run-c").to_dict()
        assert resumed.state.resumptions == 1 and resumed.state.last_seq == 28
        assert measured("snapshot_load_ms").count == 1  # the snapshot was loaded, not bypassed
        assert measured("snapshot_seq_gap").last == 7  # folded 21..27 on top of it
    finally:
        resumed.close(release=True)


@SMALL
def test_the_api_state_at_the_latest_seq_uses_the_snapshot_and_a_past_seq_replays_in_full(reader):
    lease = lease_acquire(run_id="run-api-s", holder="agent", ttl_seconds=600)
    events_append(run_id="run-api-s", epoch=lease.epoch, expected_seq=0, events=[NewEvent("run_started", {"run_id": "run-api-s"})])
    more("run-api-s", lease.epoch, more("run-api-s", lease.epoch, 1, 19), 5)
    assert snapshot_seqs("run-api-s") == [20]
    measured = Measurements()
    latest = reader.get("/api/runs/run-api-s/state").json()
    assert measured("snapshot_load_ms").count == 1
    # The replay document plus the run's key secret, which a read token sees masked, and its stale
    # observations (none: no tool here has a fresh_for).
    assert latest == {**run_state(run_id="run-api-s").to_dict(), "key_secret": "[masked]", "stale_observations": []}
    assert reader.get("/api/runs/run-api-s/state", at=25).json() == latest
    assert measured("snapshot_load_ms").count == 2
    past = reader.get("/api/runs/run-api-s/state", at=22).json()
    assert past == {**run_state(run_id="run-api-s", at=22).to_dict(), "key_secret": "[masked]", "stale_observations": []}
    assert measured("snapshot_load_ms").count == 2  # the past view folded from event 1
