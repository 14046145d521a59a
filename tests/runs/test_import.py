"""Import of reference JSONL logs: every rejection rule, torn tails, re-import and extension.
Each rejected file must leave nothing behind."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from runs.importer import log_import, paths_import
from runs.leases import lease_acquire
from runs.models import Event, Run
from runs.selectors import run_state
from runs.store import NewEvent, events_append
from tests.api.live import database_url
from tests.golden import FIXTURES
from tests.runs.helpers import BAD, good, line, nothing_stored

pytestmark = pytest.mark.django_db(transaction=True)

RECON = FIXTURES / "v1" / "run-q3-recon.jsonl"


@pytest.mark.parametrize("case", list(BAD))
def test_it_rejects_the_whole_file_naming_line_and_reason(case):
    content, reason = BAD[case]
    data = content if isinstance(content, bytes) else content.encode()
    result = log_import("logs/run-x.jsonl", data)
    assert result.outcome == "rejected", result
    assert reason in result.reason
    assert result.line().startswith("logs/run-x.jsonl: rejected: ")
    assert nothing_stored()


def test_a_torn_tail_is_reported_and_what_precedes_it_is_imported():
    data = (good() + '{"seq": 4, "type": "user_mess').encode()
    result = log_import("run-x.jsonl", data)
    assert result.outcome == "imported" and result.appended == 3 and result.torn_line == 4
    assert "torn tail" in result.line()
    assert Run.objects.get(run_id="run-x").last_seq == 3


def test_a_torn_tail_cut_inside_a_multibyte_character_is_a_torn_tail_too():
    data = good().encode() + '{"seq": 4, "type": "user_message", "payload": {"content": "€'.encode()[:-1]
    result = log_import("run-x.jsonl", data)
    assert result.outcome == "imported" and result.torn_line == 4


def test_a_complete_last_line_without_a_newline_is_imported():
    data = (good() + line(4, "user_message", {"content": "last"}).rstrip("\n")).encode()
    assert log_import("run-x.jsonl", data).appended == 4


def test_a_complete_bad_last_line_without_a_newline_is_still_rejected():
    data = (good() + line(5, "user_message", {"content": "x"}).rstrip("\n")).encode()
    result = log_import("run-x.jsonl", data)
    assert result.outcome == "rejected" and "a gap" in result.reason and nothing_stored()


def test_importing_the_same_file_again_changes_nothing():
    first = log_import(str(RECON), RECON.read_bytes())
    assert first.outcome == "imported" and first.appended == 11
    before = list(Event.objects.filter(run_id="run-q3-recon").order_by("seq").values_list("seq", "recorded_at", "epoch"))
    again = log_import(str(RECON), RECON.read_bytes())
    assert again.outcome == "unchanged" and again.appended == 0
    assert list(Event.objects.filter(run_id="run-q3-recon").order_by("seq").values_list("seq", "recorded_at", "epoch")) == before


def test_a_longer_version_of_an_imported_file_appends_only_the_new_tail(tmp_path):
    log_import("run-x.jsonl", good(n=3).encode())
    rows = list(Event.objects.filter(run_id="run-x").order_by("seq").values_list("seq", "recorded_at", "epoch"))
    result = log_import("run-x.jsonl", good(n=6).encode())
    assert result.outcome == "extended" and result.appended == 3 and (result.first_seq, result.last_seq) == (4, 6)
    assert "extended run run-x by 3 events (seq 4..6)" in result.line()
    assert list(Event.objects.filter(run_id="run-x").order_by("seq").values_list("seq", "recorded_at", "epoch"))[:3] == rows
    assert run_state(run_id="run-x").last_seq == 6


def test_a_file_whose_prefix_differs_from_the_stored_run_is_rejected():
    log_import("run-x.jsonl", good(n=3).encode())
    changed = good(n=4).replace('"m3"', '"edited"')
    result = log_import("run-x.jsonl", changed.encode())
    assert result.outcome == "rejected" and "line 3: differs from the stored event seq 3 in payload" in result.reason
    assert Run.objects.get(run_id="run-x").last_seq == 3


@pytest.mark.parametrize("n", [3, 5], ids=["same length", "longer"])
def test_a_file_whose_prefix_differs_from_the_stored_run_only_in_a_time_is_rejected(n):
    log_import("run-x.jsonl", good(n=3).encode())
    rows = list(Event.objects.filter(run_id="run-x").order_by("seq").values_list("seq", "ts", "recorded_at"))
    lines = good(n=n).splitlines(keepends=True)
    lines[1] = lines[1].replace("2026-09-08T11:00:00Z", "2026-09-08T11:00:01Z")  # seq 2, one second later
    result = log_import("run-x.jsonl", "".join(lines).encode())
    assert result.outcome == "rejected" and "line 2: differs from the stored event seq 2 in ts" in result.reason
    assert list(Event.objects.filter(run_id="run-x").order_by("seq").values_list("seq", "ts", "recorded_at")) == rows

def test_a_run_held_by_a_live_writer_is_not_extended_by_an_import():
    log_import("run-x.jsonl", good(n=3).encode())
    lease_acquire(run_id="run-x", holder="agent-7", ttl_seconds=60)
    result = log_import("run-x.jsonl", good(n=5).encode())
    assert result.outcome == "rejected" and "leased to 'agent-7'" in result.reason
    assert Run.objects.get(run_id="run-x").last_seq == 3


def test_an_imported_run_replays_to_the_golden_state_at_every_seq():
    from tests.golden import fixture_logs, golden_path

    for path in fixture_logs():
        result = log_import(str(path), path.read_bytes())
        assert result.outcome == "imported", result.line()
        golden = json.loads(golden_path(path).read_text())
        for seq, state in golden.items():
            assert json.loads(json.dumps(run_state(run_id=result.run_id, at=int(seq)).to_dict())) == state, (path.name, seq)


def test_recovery_events_after_an_import_do_not_stop_a_reimport_of_the_same_file():
    log_import("run-x.jsonl", good(n=3).encode())
    lease = lease_acquire(run_id="run-x", holder="recovery")
    events_append(run_id="run-x", epoch=lease.epoch, expected_seq=3, events=[NewEvent("operator_note", {"by": "dana", "text": "seen"})])
    assert log_import("run-x.jsonl", good(n=3).encode()).outcome == "unchanged"


def test_folders_are_imported_file_by_file_and_one_bad_file_does_not_block_the_others(tmp_path):
    shutil.copytree(FIXTURES / "v1", tmp_path / "logs")
    (tmp_path / "logs" / "run-x.jsonl").write_text(good() + line(9, "user_message", {"content": "x"}))
    results = paths_import([str(tmp_path / "logs"), str(tmp_path / "missing")])
    outcomes = {Path(r.path).name: r.outcome for r in results}
    assert outcomes == {
        "run-q3-recon.jsonl": "imported",
        "run-refund-retry.jsonl": "imported",
        "run-regulator-notice.jsonl": "imported",
        "run-support-compaction.jsonl": "imported",
        "run-x.jsonl": "rejected",
        "missing": "rejected",
    }
    assert nothing_stored("run-x")


def _manage(*args, env_extra=None):
    import os

    env = {**os.environ, **(env_extra or {})}
    return subprocess.run([sys.executable, "manage.py", *args], capture_output=True, text=True, env=env, cwd=Path(__file__).resolve().parents[2])


def test_the_commands_print_one_line_per_file_exit_non_zero_on_rejection_and_replay_json(tmp_path):
    bad = tmp_path / "run-bad.jsonl"
    bad.write_text(line(1, "run_started", {"run_id": "run-bad"}) + "oops\n")
    env = {"DATABASE_URL": database_url()}
    out = _manage("import_runs", str(RECON), str(bad), env_extra=env)
    assert out.returncode == 1, out
    assert "run-q3-recon.jsonl: imported 11 events as run run-q3-recon" in out.stdout
    assert f"{bad}: rejected: line 2: not JSON" in out.stdout
    assert "Traceback" not in out.stderr
    out = _manage("replay", "run-q3-recon", "--json", env_extra=env)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["last_seq"] == 11 and doc["status"] == "running" and len(doc["completed_calls"]) == 2
    assert [c["name"] for c in doc["uncertain_calls"]] == ["post_correction"]
    assert {"run_id", "last_seq", "status", "turns", "usage", "cost_usd", "compactions", "messages", "trajectory", "completed_calls", "uncertain_calls"} <= set(doc)
    at = json.loads(_manage("replay", "run-q3-recon", "--at", "4", "--json", env_extra=env).stdout)
    assert at["last_seq"] == 4 and at["turns"] == 1
    for args, message in (
        (("replay", "nope", "--json"), "run 'nope' does not exist"),
        (("replay", "run-q3-recon", "--at", "99", "--json"), "--at 99 is outside run 'run-q3-recon'"),
        (("import_runs", str(tmp_path / "nowhere")), "no such file or folder"),
    ):
        out = _manage(*args, env_extra=env)
        assert out.returncode != 0 and message in (out.stdout + out.stderr) and "Traceback" not in out.stderr, out


@pytest.mark.parametrize(
    "ts",
    [
        "2026-09-08T11:00:00Z",
        "2026-09-08T11:00:00.003000Z",
        "2026-09-08T11:00:00.5Z",
        "2026-09-08 11:00:00Z",
        "2026-09-08t11:00:00Z",
        "2026-09-08T11:00:00+00:00Z",
        "2026-09-08T25:00:00Z",
        "20260908T110000.000000Z",
    ],
)
def test_a_time_ending_in_z_is_read_directly_exactly_as_the_full_rule_reads_it(ts):
    from runs.importer import _ts_utc, parse_ts

    try:
        expected = parse_ts(ts)
    except ValueError:
        expected = None
    fast = _ts_utc(ts)
    assert fast is None or fast == expected
    assert fast is None or fast.tzinfo is expected.tzinfo
