"""A snapshot a read cannot use is repaired by a task, not by the read: the read counts the miss,
answers from the full log and queues ``snapshot_repair_task``; the task re-checks the snapshot and
discards it, quarantines its version, or leaves alone a pointer that has moved on."""

from __future__ import annotations

import logging

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runs import tasks
from runs.models import Snapshot, SnapshotPointer, SnapshotQuarantine
from runs.selectors import run_state
from runs.snapshot_format import FOLD_CODE, FOLD_VERSION
from runs.snapshot_verify import snapshot_repair
from runs.snapshots import run_state_fast, snapshot_current, snapshot_write
from tests.measure import Measurements
from tests.helpers import WRITE
from tests.runs.helpers import more, tamper, working_run

pytestmark = pytest.mark.django_db


def corrupt(run_id: str, at: int) -> Snapshot:
    snap = snapshot_write(run_id=run_id, state=run_state(run_id=run_id, at=at))
    Snapshot.objects.filter(id=snap.id).update(body=snap.body.replace('"turns":', '"turns": '))
    return snap


def test_a_read_that_misses_writes_nothing_and_queues_one_repair(queued_tasks):
    working_run("run-a", 40)
    snap = corrupt("run-a", 30)
    measured = Measurements()
    with CaptureQueriesContext(connection) as ctx:
        state = run_state_fast("run-a")
    assert [q["sql"] for q in ctx.captured_queries if WRITE.search(q["sql"])] == []
    assert state.to_dict() == run_state(run_id="run-a").to_dict()
    assert measured("snapshot_misses", "digest").count == 1 and measured("full_replays", "miss").count == 1
    assert snapshot_current(run_id="run-a")[0].discarded_at is None  # as the read found it

    queued = queued_tasks.drain()
    assert queued == [("runs.tasks.snapshot_repair_task", ["run-a", snap.id], {})]
    assert queued_tasks.run(queued) == ["miss"]
    snap.refresh_from_db()
    assert snap.discarded_at is not None and snap.discard_reason.startswith("digest")
    assert not SnapshotPointer.objects.filter(run_id="run-a").exists()
    assert measured("snapshot_misses", "digest").count == 1  # the read counted it; the repair does not again


def test_in_the_embedded_mode_the_repair_runs_inline_right_after_the_read():
    # tests/conftest.py makes tasks eager, as REDIS_URL unset does.
    working_run("run-a", 40)
    snap = corrupt("run-a", 30)
    assert run_state_fast("run-a").to_dict() == run_state(run_id="run-a").to_dict()
    snap.refresh_from_db()
    assert snap.discarded_at is not None
    assert not SnapshotPointer.objects.filter(run_id="run-a").exists()


def test_a_failing_repair_never_changes_what_the_read_returns(monkeypatch, caplog):
    working_run("run-a", 40)
    corrupt("run-a", 30)

    def broken(**kwargs):
        raise RuntimeError("the repair fell over")

    monkeypatch.setattr(tasks, "snapshot_repair", broken)
    with caplog.at_level(logging.ERROR, logger="reckon.snapshots"):
        assert run_state_fast("run-a").to_dict() == run_state(run_id="run-a").to_dict()
    assert "over for repair" in caplog.text
    assert snapshot_current(run_id="run-a")[0].discarded_at is None  # left for the next repair


def test_a_repair_quarantines_the_version_of_a_snapshot_that_differs_from_the_full_replay():
    working_run("run-b", 40)
    snap = snapshot_write(run_id="run-b", state=run_state(run_id="run-b", at=30))
    tamper(snap)  # a valid digest over a wrong state: only the full replay can tell
    measured = Measurements()
    result = snapshot_repair(run_id="run-b", snapshot_id=snap.id)
    assert result.outcome == "mismatch" and result.fields == ["completed_calls"]
    assert SnapshotQuarantine.objects.filter(fold_version=FOLD_VERSION, fold_code=FOLD_CODE).exists()
    snap.refresh_from_db()
    assert snap.discarded_at is not None and snap.discard_reason.startswith("equivalence")
    assert measured("full_replay_equivalence_failures").count == 1


def test_a_repair_never_touches_a_pointer_that_has_moved_on():
    lease = working_run("run-a", 40)
    snap = snapshot_write(run_id="run-a", state=run_state(run_id="run-a", at=30))
    Snapshot.objects.filter(id=snap.id).delete()  # a dangling pointer, found by a read...
    more("run-a", lease.epoch, 40, 5)
    newer = snapshot_write(run_id="run-a", state=run_state(run_id="run-a"))  # ...then a new snapshot published
    assert snapshot_repair(run_id="run-a", snapshot_id=snap.id).outcome == "none"
    assert snapshot_current(run_id="run-a")[0].id == newer.id


def test_a_repair_of_a_snapshot_that_now_passes_leaves_it_alone():
    working_run("run-a", 40)
    snap = snapshot_write(run_id="run-a", state=run_state(run_id="run-a", at=30))
    assert snapshot_repair(run_id="run-a", snapshot_id=snap.id).outcome == "equal"
    assert snapshot_current(run_id="run-a")[0].id == snap.id and snap.discarded_at is None
