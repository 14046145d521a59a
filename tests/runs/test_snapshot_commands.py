"""``verify_snapshots`` is the release gate (a snapshot that disagrees with the full log quarantines
its version and fails the command) and ``snapshot_plan`` prints the figures docs/schema-versions.md works through."""

import io
import json

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from runs.models import Run, Snapshot, SnapshotQuarantine
from runs.selectors import run_state
from runs.snapshot_format import FOLD_CODE, FOLD_VERSION
from runs.snapshots import run_state_fast, snapshot_current, snapshot_write
from tests.measure import Measurements
from tests.runs.helpers import working_run
from tests.runs.helpers import manage, tamper


@pytest.mark.django_db(transaction=True)
def test_verify_snapshots_finds_a_tampered_snapshot_quarantines_its_version_and_exits_non_zero():
    measured = Measurements()
    for run_id in ("run-a", "run-b"):
        working_run(run_id, 40)
        snapshot_write(run_id=run_id, state=run_state(run_id=run_id, at=30))
    tamper(snapshot_current(run_id="run-b")[0])
    # The digest is valid, so an ordinary load would trust it; that is why the gate exists.
    assert "k-invented" in run_state_fast("run-b").completed_calls

    done = manage("verify_snapshots")
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    assert "run run-a: snapshot" in done.stdout and "equals the full replay of 40 events" in done.stdout
    assert "run run-b: snapshot" in done.stdout and "DIFFERS from the full replay of 40 events in completed_calls" in done.stdout
    assert f"quarantined fold version(s): {FOLD_VERSION}/{FOLD_CODE}" in done.stderr

    assert SnapshotQuarantine.objects.filter(fold_version=FOLD_VERSION, fold_code=FOLD_CODE).exists()
    # Counted by the command's own process, merged through the shared multiprocess folder.
    assert measured("full_replay_equivalence_failures").total == 1
    # No further loads of that version: not the tampered one, nor a fresh one written by the same fold.
    snapshot_write(run_id="run-b", state=run_state(run_id="run-b", at=35))
    assert run_state_fast("run-b").to_dict() == run_state(run_id="run-b").to_dict()
    assert run_state_fast("run-a").to_dict() == run_state(run_id="run-a").to_dict()
    assert measured("snapshot_misses", "quarantined").total == 2


@pytest.mark.django_db
def test_verify_snapshots_passes_when_every_snapshot_agrees():
    working_run("run-a", 40)
    snapshot_write(run_id="run-a", state=run_state(run_id="run-a", at=25))
    out = io.StringIO()
    call_command("verify_snapshots", "--json", stdout=out)
    (result,) = json.loads(out.getvalue())
    assert (result["run_id"], result["outcome"], result["seq"], result["tail"], result["events"]) == ("run-a", "equal", 25, 15, 40)
    assert not SnapshotQuarantine.objects.exists()


@pytest.mark.django_db
def test_verify_snapshots_reports_a_corrupt_snapshot_as_a_miss_not_an_equivalence_failure():
    working_run("run-a", 40)
    snap = snapshot_write(run_id="run-a", state=run_state(run_id="run-a", at=25))
    Snapshot.objects.filter(id=snap.id).update(body=snap.body[:-2])
    measured = Measurements()
    out = io.StringIO()
    call_command("verify_snapshots", stdout=out)
    assert "is unusable (digest:" in out.getvalue()
    assert measured("snapshot_misses", "digest").total == 1
    assert not SnapshotQuarantine.objects.exists()


@pytest.mark.django_db
def test_verify_snapshots_samples_and_refuses_a_bad_sample():
    for run_id in ("run-a", "run-b", "run-c"):
        working_run(run_id, 10)
        snapshot_write(run_id=run_id, state=run_state(run_id=run_id))
    out = io.StringIO()
    call_command("verify_snapshots", "--sample", "2", "--json", stdout=out)
    assert len(json.loads(out.getvalue())) == 2
    with pytest.raises(CommandError, match="--sample must be a whole number >= 1, got '0'"):
        call_command("verify_snapshots", "--sample", "0")


# --- snapshot_plan ------------------------------------------------------------------------------


def plan(*args):
    out = io.StringIO()
    call_command("snapshot_plan", *args, stdout=out)
    return out.getvalue()


def test_snapshot_plan_reproduces_the_documented_figures():
    # docs/schema-versions.md: 4,000 events, 2 ms per event, 120 ms per snapshot, six recoveries, every 500 events.
    doc = json.loads(
        plan("--events", "4000", "--recoveries", "6", "--objective-ms", "300", "--replay-ms-per-event", "2", "--snapshot-ms", "120", "--interval", "500", "--json")
    )
    assert doc["full_replay_ms_per_recovery"] == 4000
    assert doc["full_replays_ms"] == 24000
    chosen = doc["chosen"]
    assert chosen["snapshots_per_run"] == 8
    assert chosen["with_snapshots_ms"] == pytest.approx(3960)
    assert chosen["saving_ms"] == pytest.approx(20040)
    assert chosen["break_even_recoveries"] == pytest.approx(0.96 / 3.5, abs=1e-9)
    assert chosen["worst_case_tail_ms"] == 998 and chosen["meets_objective"] is False
    # 300 ms at 2 ms per event permits 150 tail events: K = 151.
    assert doc["max_interval"] == 151


def test_snapshot_plan_prints_the_figures_in_words():
    text = plan("--events", "4000", "--recoveries", "6", "--objective-ms", "300", "--replay-ms-per-event", "2", "--snapshot-ms", "120")
    assert "full replays per run (R*N/2*c):          24.00 s" in text
    assert "largest K meeting the objective:         151 (worst-case tail 150 events = 300.0 ms)" in text
    assert "break-even recovery rate at K=151" in text


@pytest.mark.django_db
def test_snapshot_plan_measures_on_the_configured_database_and_leaves_nothing_behind():
    doc = json.loads(plan("--events", "300", "--recoveries", "2", "--objective-ms", "50", "--json"))
    assert doc["replay_ms_per_event"] > 0 and doc["snapshot_write_ms"] > 0 and doc["snapshot_load_ms"] > 0
    assert doc["measured_on"].startswith(f"measured on {connection.vendor} with a 300-event run")
    assert not Run.objects.exists() and not Snapshot.objects.exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--events", "0", "--recoveries", "6", "--objective-ms", "300"], "--events must be a whole number >= 1, got '0'"),
        (["--events", "4k", "--recoveries", "6", "--objective-ms", "300"], "--events must be a whole number >= 1, got '4k'"),
        (["--events", "4000", "--recoveries", "-1", "--objective-ms", "300"], "--recoveries must be a finite number >= 0, got '-1'"),
        (["--events", "4000", "--recoveries", "six", "--objective-ms", "300"], "--recoveries must be a number, got 'six'"),
        (["--events", "4000", "--recoveries", "6", "--objective-ms", "0"], "--objective-ms must be a finite number > 0, got '0'"),
        (["--events", "4000", "--recoveries", "6", "--objective-ms", "nan"], "--objective-ms must be a finite number > 0, got 'nan'"),
        (["--events", "4000", "--recoveries", "6", "--objective-ms", "300", "--interval", "-5"], "--interval must be a whole number >= 1, got '-5'"),
    ],
)
def test_snapshot_plan_refuses_bad_input_with_a_reason(args, message):
    with pytest.raises(CommandError) as info:
        plan(*args)
    assert str(info.value) == message


@pytest.mark.django_db(transaction=True)
def test_snapshot_plan_bad_input_exits_non_zero_without_a_traceback():
    done = manage("snapshot_plan", "--events", "lots", "--recoveries", "6", "--objective-ms", "300")
    assert done.returncode == 1
    assert done.stderr.strip() == "CommandError: --events must be a whole number >= 1, got 'lots'"
