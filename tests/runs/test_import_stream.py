"""The import streams a file in chunks (RECKON_IMPORT_CHUNK; small here, so that a few events cross
several chunks and, on PostgreSQL, take the COPY path), and keeps every rule of a whole-file import."""

import io
import json

import pytest

from runs.chain import chain_verify
from runs.importer import log_import_stream, paths_import
from runs.models import Event, Run
from runs.selectors import run_state
from tests.golden import fixture_logs, golden_path
from tests.runs.helpers import BAD, good, line, nothing_stored

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def small_chunks(settings):
    settings.RECKON_IMPORT_CHUNK = 7


def long_log(run_id="run-x", n=100):
    return good(run_id, n=n)


def imported(data: str | bytes, name="run-x.jsonl"):
    return log_import_stream(name, io.BytesIO(data.encode() if isinstance(data, str) else data))


@pytest.mark.parametrize("case", list(BAD))
def test_every_rejection_rule_holds_across_chunks(case):
    content, reason = BAD[case]
    # The bad line comes after several full chunks of good events.
    head = long_log(n=40)
    body = content.encode() if isinstance(content, str) else content
    tail = body.split(b"\n", 3)[3] if body.startswith(good().encode()) else None
    data = head.encode() + tail.replace(b'"seq": 4', b'"seq": 41').replace(b'"seq": 5', b'"seq": 42').replace(b'"seq": 3', b'"seq": 40') if tail else body
    result = imported(data)
    assert result.outcome == "rejected", result
    assert reason.replace("line 4", "line 41").replace("5 where 4", "42 where 41").replace("3 where 4", "40 where 41") in result.reason
    assert nothing_stored()


def test_a_rejection_in_the_last_line_of_a_large_file_leaves_nothing():
    data = long_log(n=500) + line(501, "user_message", {"content": "x", "dup": 1}).replace('"dup": 1', '"dup": 1, "dup": 2')
    result = imported(data)
    assert result.outcome == "rejected" and result.reason.startswith("line 501: payload.dup appears twice"), result.reason
    assert nothing_stored()


def test_a_rejection_in_the_last_line_of_an_extension_leaves_the_stored_run_as_it_was():
    assert imported(long_log(n=30)).outcome == "imported"
    before = list(Event.objects.filter(run_id="run-x").order_by("seq").values_list("seq", "hash"))
    result = imported(long_log(n=200) + line(202, "user_message", {"content": "gap"}))
    assert result.outcome == "rejected" and "line 201: seq 202 where 201 was expected (a gap)" in result.reason
    assert list(Event.objects.filter(run_id="run-x").order_by("seq").values_list("seq", "hash")) == before
    run = Run.objects.get(run_id="run-x")
    assert run.last_seq == 30 and run.lease_holder == ""


def test_a_chunked_import_is_chained_and_replays_as_a_whole_one():
    result = imported(long_log(n=100))
    assert (result.outcome, result.appended, result.last_seq) == ("imported", 100, 100)
    problem, last, head = chain_verify(run_id="run-x")
    assert problem is None and last == 100
    assert bytes(Run.objects.get(run_id="run-x").head) == head
    assert run_state(run_id="run-x").last_seq == 100


def test_a_longer_file_is_compared_chunk_by_chunk_and_only_its_tail_appended():
    imported(long_log(n=30))
    rows = list(Event.objects.filter(run_id="run-x").order_by("seq").values_list("seq", "recorded_at", "hash"))
    result = imported(long_log(n=95))
    assert (result.outcome, result.appended, result.first_seq, result.last_seq) == ("extended", 65, 31, 95)
    assert list(Event.objects.filter(run_id="run-x").order_by("seq").values_list("seq", "recorded_at", "hash"))[:30] == rows
    assert chain_verify(run_id="run-x")[0] is None
    assert imported(long_log(n=95)).outcome == "unchanged"
    changed = long_log(n=120).replace('"m64"', '"edited"')
    result = imported(changed)
    assert result.outcome == "rejected" and "line 64: differs from the stored event seq 64 in payload" in result.reason
    assert Run.objects.get(run_id="run-x").last_seq == 95


def test_a_torn_tail_after_several_chunks_is_reported_and_the_rest_imported():
    result = imported(long_log(n=50) + '{"seq": 51, "type": "user_mess')
    assert (result.outcome, result.appended, result.torn_line) == ("imported", 50, 51)
    assert Run.objects.get(run_id="run-x").last_seq == 50


def test_fixture_logs_imported_in_chunks_of_two_replay_to_their_golden_states(settings, tmp_path):
    settings.RECKON_IMPORT_CHUNK = 2
    paths = list(fixture_logs())
    results = paths_import([str(p) for p in paths])
    assert [r.outcome for r in results] == ["imported"] * len(paths), [r.line() for r in results]
    for path, result in zip(paths, results):
        assert chain_verify(run_id=result.run_id)[0] is None
        golden = json.loads(golden_path(path).read_text())
        for seq, state in golden.items():
            assert json.loads(json.dumps(run_state(run_id=result.run_id, at=int(seq)).to_dict())) == state, (path.name, seq)


def test_a_replay_read_in_chunks_folds_to_the_state_of_the_whole_log(settings):
    from runs.fold import fold
    from runs.store import events_load, events_stream

    assert imported(long_log(n=50)).outcome == "imported"
    settings.RECKON_READ_CHUNK = 3
    assert [e.seq for e in events_stream(run_id="run-x", after=4, upto=17)] == list(range(5, 18))
    assert [e.seq for e in events_stream(run_id="run-x")] == list(range(1, 51))
    whole = fold(events_load(run_id="run-x"))
    assert run_state(run_id="run-x").to_dict() == whole.to_dict()
    assert run_state(run_id="run-x", at=22).to_dict() == fold(events_load(run_id="run-x", upto=22)).to_dict()


def test_the_replay_reader_gives_the_logs_events_as_tuples_with_the_timestamps_the_fold_reads(settings):
    # What run_state and the snapshot check fold (events_replay) against events_stream's Events:
    # the same events, upcast, and the same state, every field and every type of value included.
    from runs.fold import TIMESTAMPED, fold
    from runs.snapshot_format import state_dumps
    from runs.store import events_load, events_replay, events_stream

    settings.RECKON_READ_CHUNK = 2
    paths = list(fixture_logs())
    results = paths_import([str(p) for p in paths])
    assert [r.outcome for r in results] == ["imported"] * len(paths), [r.line() for r in results]
    for result in results:
        rows, events = list(events_replay(run_id=result.run_id)), events_load(run_id=result.run_id)
        assert len(rows) == len(events) > 2 and all(isinstance(row, tuple) for row in rows)
        assert [tuple(ev) if ev.type in TIMESTAMPED else tuple(ev._replace(ts=None)) for ev in events] == rows, result.run_id
        assert state_dumps(fold(rows)) == state_dumps(fold(events_stream(run_id=result.run_id))), result.run_id
        for upto in (1, 2, 3, len(events) - 1):
            assert [row[0] for row in events_replay(run_id=result.run_id, upto=upto, chunk=upto)] == list(range(1, upto + 1))
            assert state_dumps(run_state(run_id=result.run_id, at=upto)) == state_dumps(fold(events_load(run_id=result.run_id, upto=upto)))


def test_an_import_of_many_chunks_calls_the_after_append_hooks_once_after_its_commit(monkeypatch):
    from runs import store

    seen = []
    monkeypatch.setattr(store, "_AFTER_APPEND", [lambda run_id, first, last: seen.append((run_id, first, last))])
    assert imported(long_log(n=50)).outcome == "imported"
    assert seen == [("run-x", 1, 50)]
    assert imported(long_log(n=60) + line(62, "user_message", {"content": "gap"})).outcome == "rejected"
    assert seen == [("run-x", 1, 50)]  # a rolled-back import calls nothing
    assert imported(long_log(n=80)).outcome == "extended"
    assert seen == [("run-x", 1, 50), ("run-x", 51, 80)]


def test_an_import_without_a_broker_leaves_a_snapshot_at_its_last_seq_that_is_the_full_replay(settings, tmp_path):
    # Tasks are eager in tests (no broker): the snapshot check runs in the importing process after
    # the commit, and folds the run a read chunk at a time (runs.snapshots.snapshot_fold_write).
    from django.core.management import call_command

    from bench.scale_log import log_write
    from runs.models import Snapshot, SnapshotPointer
    from runs.snapshot_format import state_dumps, state_loads

    settings.RECKON_IMPORT_CHUNK = 500
    settings.RECKON_READ_CHUNK = 300
    settings.RECKON_SNAPSHOT_INTERVAL = 500
    settings.RECKON_SNAPSHOT_MIN_EVENTS = 1000
    path = tmp_path / "run-long.jsonl"
    log_write(path, events=2500)
    [result] = paths_import([str(path)])
    assert result.outcome == "imported" and result.appended == 2500
    snap = Snapshot.objects.get(id=SnapshotPointer.objects.get(run_id="run-long").snapshot_id)
    assert snap.seq == 2500
    full = run_state(run_id="run-long")
    assert len(full.completed_calls) > 800  # the generated log's calls, every one completed
    assert snap.body == state_dumps(full)
    assert state_loads(snap.body).to_dict() == full.to_dict()
    out = io.StringIO()
    call_command("verify_snapshots", stdout=out)
    assert "run run-long: snapshot" in out.getvalue() and "equals the full replay of 2500 events" in out.getvalue()


def test_every_fixture_log_imported_with_its_snapshot_due_gets_the_full_replays_body(settings):
    # Tasks are eager, so the check after the commit folds the run in this process, a read chunk
    # at a time: byte for byte the body of the full replay, for logs of every version and type the
    # fixtures hold, in chunks of 3 and 2.
    from runs.models import Snapshot, SnapshotPointer
    from runs.snapshot_format import state_dumps

    settings.RECKON_IMPORT_CHUNK = 3
    settings.RECKON_READ_CHUNK = 2
    settings.RECKON_SNAPSHOT_INTERVAL = 1
    settings.RECKON_SNAPSHOT_MIN_EVENTS = 1
    paths = list(fixture_logs())
    results = paths_import([str(p) for p in paths])
    assert [r.outcome for r in results] == ["imported"] * len(paths), [r.line() for r in results]
    for result in results:
        snap = Snapshot.objects.get(id=SnapshotPointer.objects.get(run_id=result.run_id).snapshot_id)
        assert snap.seq == result.last_seq
        assert snap.body == state_dumps(run_state(run_id=result.run_id)), result.path


def test_a_rejected_import_that_was_folding_its_snapshot_leaves_nothing(settings):
    from runs.models import Snapshot

    settings.RECKON_SNAPSHOT_INTERVAL = 5
    settings.RECKON_SNAPSHOT_MIN_EVENTS = 5
    assert imported(long_log(n=60) + line(62, "user_message", {"content": "gap"})).outcome == "rejected"
    assert nothing_stored() and not Snapshot.objects.exists()


def test_an_import_whose_snapshot_cannot_be_written_is_imported_and_snapshotted_by_the_next_check(settings, monkeypatch):
    # The snapshot is a cache: a write that fails after the commit costs the snapshot, never the
    # import, and the next check writes it.
    from runs import snapshots
    from runs.models import Snapshot
    from runs.snapshot_format import state_dumps

    write, refused = snapshots.snapshot_fold_write, []

    def refuse_once(**kw):
        if refused:
            return write(**kw)
        refused.append(kw)
        raise RuntimeError("no room for the snapshot")

    monkeypatch.setattr(snapshots, "snapshot_fold_write", refuse_once)
    settings.RECKON_SNAPSHOT_INTERVAL = 5
    settings.RECKON_SNAPSHOT_MIN_EVENTS = 5
    result = imported(long_log(n=40))
    assert result.outcome == "imported" and result.appended == 40
    assert len(refused) == 1 and not Snapshot.objects.filter(run_id="run-x").exists()
    snapshots.snapshot_maybe("run-x")
    [snap] = Snapshot.objects.filter(run_id="run-x")
    assert snap.seq == 40 and snap.body == state_dumps(run_state(run_id="run-x"))
