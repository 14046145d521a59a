"""Pins what /metrics shows of replay and snapshots (docs/schema-versions.md, "Measurements": events_replayed, replay_duration_ms,
snapshot_load_ms, snapshot_write_ms, snapshot_seq_gap, full_replay_equivalence_failures).

Only the scraped TEXT is pinned (names, counts moving), not where the figures are kept."""

from __future__ import annotations

import copy
import subprocess
import sys
from io import StringIO

import pytest
from django.core.management import call_command

from runs.models import Snapshot
from runs.selectors import run_state
from runs.snapshot_format import body_digest, state_dumps
from runs.snapshot_verify import snapshot_verify
from runs.snapshots import snapshot_write
from tests.api.live import ROOT, child_env
from tests.api.helpers import _samples
from tests.runs.helpers import working_run

pytestmark = pytest.mark.django_db(transaction=True)

SIX = ("events_replayed", "replay_duration_ms", "snapshot_load_ms", "snapshot_write_ms", "snapshot_seq_gap", "full_replay_equivalence_failures")


def scrape(reader) -> dict:
    r = reader.get("/metrics")
    assert r.status_code == 200
    return _samples(r.content.decode())


def _over_labels(m: dict, sample: str) -> list[float]:
    return [v for (n, _labels), v in m.items() if n == sample]


def count(m: dict, name: str) -> float:
    """The series' count summed over its labels: the pin is the name and the movement, not a label."""
    return sum(_over_labels(m, f"reckon_{name}_count"))


def total(m: dict, name: str) -> float:
    return sum(_over_labels(m, f"reckon_{name}_sum"))


@pytest.mark.django_db(transaction=True)
def test_it_exposes_every_snapshot_metric_before_anything_was_replayed(tmp_path):
    """A counter that first appears at 1 hides its first increase from rate() and increase(): the
    release gate's failures must be visible at 0, before the first one happens. The figures live in
    process memory, so "before anything" is a fresh process with a folder of its own."""
    code = "from api.metrics import metrics_text; print(metrics_text().decode())"
    env = child_env(PROMETHEUS_MULTIPROC_DIR=str(tmp_path))
    done = subprocess.run([sys.executable, "manage.py", "shell", "-v", "0", "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    m = _samples(done.stdout)
    for name in SIX:
        assert _over_labels(m, f"reckon_{name}_count"), f"/metrics does not show reckon_{name}"
        assert count(m, name) == 0


def test_it_shows_every_snapshot_metric_moving_on_metrics(reader):
    working_run("run-pin-m", 30)
    snapshot_write(run_id="run-pin-m", state=run_state(run_id="run-pin-m", at=20))
    truth = run_state(run_id="run-pin-m")
    wrong = copy.deepcopy(truth)
    wrong.turns += 1  # a fold bug, cached
    before = scrape(reader)  # from here on, no full replay of the test's own: only the snapshot path

    latest = reader.get("/api/runs/run-pin-m/state")  # snapshot at 20 plus a tail of 10
    assert latest.status_code == 200
    snap = snapshot_write(run_id="run-pin-m", state=truth)
    body = state_dumps(wrong)
    Snapshot.objects.filter(id=snap.id).update(body=body, digest=body_digest(body))
    assert snapshot_verify(run_id="run-pin-m").outcome == "mismatch"
    after = scrape(reader)

    for name in SIX:
        assert count(after, name) > count(before, name), f"reckon_{name}_count did not move"
        assert _over_labels(after, f"reckon_{name}_last") and _over_labels(after, f"reckon_{name}_max")
    assert 10 in _over_labels(after, "reckon_snapshot_seq_gap_last")
    assert count(after, "full_replay_equivalence_failures") - count(before, "full_replay_equivalence_failures") == 1


def test_it_counts_a_full_replay_of_the_api_on_metrics(reader):
    working_run("run-pin-full", 40)
    before = scrape(reader)

    r = reader.get("/api/runs/run-pin-full/state", at=25)  # a past seq: folded from event 1
    assert r.status_code == 200 and r.json()["last_seq"] == 25
    after = scrape(reader)

    assert count(after, "events_replayed") == count(before, "events_replayed") + 1
    assert total(after, "events_replayed") == total(before, "events_replayed") + 25
    assert count(after, "replay_duration_ms") == count(before, "replay_duration_ms") + 1
    assert 25 in _over_labels(after, "reckon_events_replayed_last")


def test_it_counts_a_full_replay_of_the_replay_command_on_metrics(reader):
    working_run("run-pin-cmd", 12)
    before = scrape(reader)

    call_command("replay", "run-pin-cmd", stdout=StringIO())
    after = scrape(reader)

    assert count(after, "events_replayed") == count(before, "events_replayed") + 1
    assert total(after, "events_replayed") == total(before, "events_replayed") + 12
    assert count(after, "replay_duration_ms") == count(before, "replay_duration_ms") + 1
