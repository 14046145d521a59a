"""Replay measurements are kept in process memory (prometheus_client, multiprocess mode) and shown
by /metrics under the names they always had: a snapshot read and a full replay move them, and a
replay in another process is merged in."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from prometheus_client.parser import text_string_to_metric_families

from runs.measurements import multiprocess_dir
from runs.metrics_dir import multiproc_dir_clean
from runs.selectors import run_state
from runs.snapshots import snapshot_write
from tests.runs.helpers import manage, working_run


def scrape(client) -> dict:
    r = client.get("/metrics")
    assert r.status_code == 200
    out = {}
    for family in text_string_to_metric_families(r.content.decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def moved(before: dict, after: dict, name: str, label: str = "") -> float:
    key = (name, (("label", label),))
    return after.get(key, 0.0) - before.get(key, 0.0)


@pytest.mark.django_db
def test_a_snapshot_read_and_a_full_replay_move_the_process_metrics_that_metrics_shows(reader):
    working_run("run-m", 30)
    snapshot_write(run_id="run-m", state=run_state(run_id="run-m", at=20))
    before = scrape(reader)

    assert reader.get("/api/runs/run-m/state").status_code == 200  # the snapshot at 20 plus 10 events
    assert reader.get("/api/runs/run-m/state", at=5).status_code == 200  # a past seq: from event 1
    after = scrape(reader)

    assert moved(before, after, "reckon_snapshot_load_ms_count") == 1
    assert after[("reckon_snapshot_seq_gap_last", (("label", ""),))] == 10
    assert moved(before, after, "reckon_full_replays_count", "selector") == 1
    assert moved(before, after, "reckon_events_replayed_count") == 2
    assert moved(before, after, "reckon_events_replayed_sum") == 15  # 10 of the tail + 5 from event 1
    assert moved(before, after, "reckon_replay_duration_ms_count") == 2
    assert after[("reckon_events_replayed_max", (("label", ""),))] >= 10
    assert ("reckon_snapshot_write_ms_count", (("label", ""),)) in after
    assert moved(before, after, "reckon_snapshot_misses_count", "digest") == 0
    # The database figures are still there beside them.
    assert ("reckon_runs", (("state", "unfinished"),)) in after


@pytest.mark.django_db(transaction=True)
def test_a_replay_in_another_process_shows_in_this_process_metrics(reader):
    assert multiprocess_dir(), "the test session runs in multiprocess mode (tests/multiproc_dir.py)"
    working_run("run-m", 12)
    before = scrape(reader)
    done = manage("replay", "run-m", "--json")
    assert done.returncode == 0, done.stderr
    after = scrape(reader)
    assert moved(before, after, "reckon_full_replays_count", "selector") == 1
    assert moved(before, after, "reckon_events_replayed_sum") == 12


def test_start_up_cleaning_removes_only_the_files_of_processes_that_are_gone(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    mine = [tmp_path / f"summary_{os.getpid()}.db", tmp_path / f"gauge_max_{os.getpid()}.db"]
    theirs = [tmp_path / f"summary_{gone.pid}.db", tmp_path / f"gauge_mostrecent_{gone.pid}.db"]
    for path in mine + theirs:
        path.write_bytes(b"")
    removed = multiproc_dir_clean(str(tmp_path))
    assert sorted(removed) == sorted(str(p) for p in theirs)
    assert all(p.exists() for p in mine) and not any(p.exists() for p in theirs)
    assert multiproc_dir_clean("") == []  # multiprocess mode off: nothing to clean
