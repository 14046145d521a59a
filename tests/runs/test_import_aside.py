"""A long file's chunks after the first are read and checked by a child process of the importer
(runs.importer._ChunksAside, from RECKON_IMPORT_READ_ASIDE_BYTES on; 0 here, so that every file of
more than a chunk takes it): the same events, chain and rejections as a file read in process."""

import io
import multiprocessing

import pytest

from runs import importer
from runs.chain import chain_verify
from runs.importer import log_import_stream, log_parse, paths_import
from runs.models import Run
from runs.store import events_read
from tests.golden import fixture_logs
from tests.runs.test_import import good, line, nothing_stored

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def read_aside(settings, monkeypatch):
    settings.RECKON_IMPORT_CHUNK = 7
    settings.RECKON_IMPORT_READ_ASIDE_BYTES = 0
    started = []
    init = importer._ChunksAside.__init__

    def counted(self, *args, **kwargs):
        started.append(self)
        init(self, *args, **kwargs)

    monkeypatch.setattr(importer._ChunksAside, "__init__", counted)
    yield started
    assert multiprocessing.active_children() == []  # no reader is left behind, whatever happened


def imported(data: str, name="run-x.jsonl"):
    return log_import_stream(name, io.BytesIO(data.encode()))


def test_a_file_read_aside_stores_exactly_the_events_a_read_in_process_makes(tmp_path, read_aside):
    from bench.scale_log import log_write

    path = tmp_path / "run-long.jsonl"
    log_write(path, events=300)  # starts, completions, model turns and a compaction, in 43 chunks
    [result] = paths_import([str(path)])
    assert (result.outcome, result.appended) == ("imported", 300) and read_aside
    expected = log_parse(str(path), path.read_bytes()).events  # checked in this process, whole
    assert [tuple(e) for e in events_read(run_id="run-long")] == [tuple(e) for e in expected]
    problem, last, head = chain_verify(run_id="run-long")
    assert problem is None and last == 300 and bytes(Run.objects.get(run_id="run-long").head) == head


def test_every_fixture_log_read_aside_is_imported_as_it_is_read_in_process(tmp_path, read_aside):
    results = paths_import([str(p) for p in fixture_logs()])
    assert all(r.outcome == "imported" for r in results), [r.line() for r in results]
    assert read_aside
    for r in results:
        with open(r.path, "rb") as f:
            expected = log_parse(r.path, f.read()).events
        assert [tuple(e) for e in events_read(run_id=r.run_id)] == [tuple(e) for e in expected], r.path
        problem, last, head = chain_verify(run_id=r.run_id)
        assert problem is None and last == r.last_seq
        assert bytes(Run.objects.get(run_id=r.run_id).head) == head


def test_a_rejection_in_the_last_line_of_a_file_read_aside_leaves_nothing(read_aside):
    data = good("run-x", n=500) + line(501, "user_message", {"content": "x", "dup": 1}).replace('"dup": 1', '"dup": 1, "dup": 2')
    result = imported(data)
    assert read_aside
    assert result.outcome == "rejected" and result.reason.startswith("line 501: payload.dup appears twice"), result.reason
    assert nothing_stored()


def test_a_gap_after_many_chunks_read_aside_is_rejected_naming_its_line(read_aside):
    result = imported(good("run-x", n=60) + line(62, "user_message", {"content": "gap"}))
    assert read_aside
    assert result.outcome == "rejected" and "line 61: seq 62 where 61 was expected (a gap)" in result.reason
    assert nothing_stored()


def test_a_torn_tail_of_a_file_read_aside_is_reported_and_the_rest_imported(read_aside):
    data = good("run-x", n=50) + '{"seq": 51, "type": "user_mess'
    result = imported(data)
    assert read_aside
    assert (result.outcome, result.appended, result.last_seq, result.torn_line) == ("imported", 50, 50, 51)
    assert Run.objects.get(run_id="run-x").last_seq == 50


def test_a_file_of_one_chunk_is_never_read_aside(read_aside):
    assert imported(good("run-x", n=5)).outcome == "imported"
    assert read_aside == []


@pytest.fixture
def prepared(monkeypatch):
    """The chunks that reached the importer prepared by the reading process (``PreparedChunk``)."""
    seen = []
    loads = importer.prepared_loads

    def counted(data):
        chunk = loads(data)
        seen.append(chunk.expected_seq)
        return chunk

    monkeypatch.setattr(importer, "prepared_loads", counted)
    return seen


def test_chunks_after_the_first_come_prepared_by_the_reading_process(tmp_path, read_aside, prepared):
    from bench.scale_log import log_write

    path = tmp_path / "run-long.jsonl"
    log_write(path, events=70)
    [result] = paths_import([str(path)])
    assert (result.outcome, result.appended) == ("imported", 70)
    # Chunks of 7: the first is read here, the other nine come prepared, each after the one before.
    assert prepared == [7 * k for k in range(1, 10)]
    expected = log_parse(str(path), path.read_bytes()).events
    assert [tuple(e) for e in events_read(run_id="run-long")] == [tuple(e) for e in expected]
    problem, last, head = chain_verify(run_id="run-long")
    assert problem is None and last == 70 and bytes(Run.objects.get(run_id="run-long").head) == head


@pytest.mark.parametrize("stored", [20, 21, 28])
def test_an_extension_read_aside_appends_the_tail_as_a_read_in_process_does(read_aside, prepared, stored):
    # The run holds a prefix ending inside a chunk (20), at a chunk's first line (21) or at a
    # chunk's end (28): the chunk holding the first new event is written by the importer itself.
    full = good("run-x", n=60)
    first = imported("".join(full.splitlines(keepends=True)[:stored]))
    assert (first.outcome, first.last_seq) == ("imported", stored)
    prepared.clear()
    result = imported(full)
    assert (result.outcome, result.first_seq, result.last_seq) == ("extended", stored + 1, 60), result.line()
    first_new_chunk_end = -(-(stored + 1) // 7) * 7
    assert prepared and prepared[0] == first_new_chunk_end and all(s > stored for s in prepared)
    expected = log_parse("run-x.jsonl", full.encode()).events
    assert [tuple(e) for e in events_read(run_id="run-x")] == [tuple(e) for e in expected]
    problem, last, _ = chain_verify(run_id="run-x")
    assert problem is None and last == 60


def test_an_event_the_store_refuses_in_a_prepared_chunk_rejects_the_file_as_in_process(settings, read_aside, prepared):
    # Two tenants for one call: a rule of the store's, not of the line check, so the reading
    # process meets it while preparing a chunk; the message is the store's, as in process.
    bad = line(40, "tool_call_started", {"call_id": "c1", "name": "post", "arguments": {"tenant": "b"}, "tenant": "a"})
    data = good("run-x", n=39) + bad + "".join(line(s, "user_message", {"content": "x"}) for s in range(41, 50))
    aside = imported(data)
    assert read_aside and nothing_stored()
    settings.RECKON_IMPORT_READ_ASIDE_BYTES = 1 << 40
    in_process = imported(data)
    assert aside.outcome == in_process.outcome == "rejected"
    assert aside.reason == in_process.reason and "(seq 40, tool_call_started)" in aside.reason and "tenant" in aside.reason, aside.reason
    assert nothing_stored()


def test_sealed_values_in_prepared_chunks_are_chained_as_commitments(read_aside, prepared):
    from recovery.masking import sealed_fields_forget
    from recovery.models import ToolPolicy
    from runs.models import EventSeal

    ToolPolicy.objects.create(tool="post_correction", risk_class="irreversible", strategy="escalate", sensitive_fields=["account"])
    sealed_fields_forget()  # the sealed names are read before the reading process is forked
    calls = "".join(line(s, "tool_call_started", {"call_id": f"c{s}", "name": "post_correction", "arguments": {"account": f"A-{s}"}}) for s in range(31, 36))
    data = good("run-x", n=30) + calls
    result = imported(data)
    assert result.outcome == "imported" and prepared
    assert sorted(EventSeal.objects.filter(run_id="run-x").values_list("seq", flat=True)) == list(range(31, 36))
    problem, last, _ = chain_verify(run_id="run-x")
    assert problem is None and last == 35


@pytest.mark.parametrize("early", [False, True])
def test_prepared_chunks_store_each_time_as_an_append_writes_it(read_aside, prepared, early):
    # Whole seconds, fractions, and (``early``) a year before 1000 in every chunk, whose text in the
    # chain's frame is not RFC 3339's: the rows hold the same times, in the same text, as the
    # store's own formatting of each one (SQLite keeps a time as text).
    from django.db import connection

    times = ["2026-09-08T11:00:00Z", "2026-09-08T11:00:00.000001Z", "2026-09-08T11:00:00.250000Z"] + (["0999-01-02T03:04:05.000000Z"] if early else [])
    data = line(1, "run_started", {"run_id": "run-x"}) + "".join(line(s, "user_message", {"content": f"m{s}"}, ts=times[s % len(times)]) for s in range(2, 40))
    result = imported(data)
    assert result.outcome == "imported" and prepared
    expected = log_parse("run-x.jsonl", data.encode()).events
    assert [tuple(e) for e in events_read(run_id="run-x")] == [tuple(e) for e in expected]
    with connection.cursor() as cur:
        cur.execute("SELECT CAST(ts AS TEXT) FROM reckon_event WHERE run_id = %s ORDER BY seq", ["run-x"])
        stored = [row[0] for row in cur.fetchall()]
    if connection.vendor == "sqlite":
        assert stored == [connection.ops.adapt_datetimefield_value(e.ts) for e in expected]
    problem, last, _ = chain_verify(run_id="run-x")
    assert problem is None and last == 39


def test_a_prepared_chunk_decodes_only_what_the_read_models_read():
    # A model turn is read by no read model: its payload and time stay undecoded in the writing
    # process; a tool call's start is decoded as a read decodes it, its keys sorted.
    from datetime import datetime, timezone

    from runs.canonical import sealing_now
    from runs.fold import Event
    from runs.store import _prepared_decoded, events_prepare, prepared_dumps, prepared_loads

    ts = datetime(2026, 9, 8, 11, 0, tzinfo=timezone.utc)
    events = [
        Event(2, "model_turn", {"text": "t", "tool_calls": []}, ts, 1),
        Event(3, "tool_call_started", {"name": "post", "call_id": "c1", "arguments": {"b": 1, "a": 2}}, ts, 1),
    ]
    chunk = prepared_loads(prepared_dumps(events_prepare("run-x", 1, events, sealing=sealing_now(), key_secret_fill=False)))
    turn, start = chunk.events
    assert (turn.payload, turn.ts) == (None, None)
    assert start.payload == events[1].payload and list(start.payload["arguments"]) == ["a", "b"] and start.ts == ts
    assert [tuple(e) for e in _prepared_decoded(chunk)] == [tuple(e) for e in events]


@pytest.mark.parametrize(
    "given",
    [
        ["2026-09-08T11:00:00.003000Z", "2026-09-08T11:00:00.004000Z"],
        ["2026-09-08T11:00:00Z"],  # no fraction: the frame writes six digits
        ["2026-09-08T11:00:00.003000+00:00"],
        ["2026-09-08t11:00:00.003000Z"],
        ["2026-09-08 11:00:00.003000Z"],
        ["0999-09-08T11:00:00.003000Z"],  # a year before 1000: the frame does not pad it
        ["2026-09-08T11:00:00.003000Z", "2026-09-08T11:00:00.0040Z"],
    ],
)
def test_a_time_is_taken_as_its_frame_text_only_when_it_is_that_text(given):
    from runs.canonical import ts_texts
    from runs.importer import parse_ts
    from runs.store import _ts_canonical

    framed = ts_texts([parse_ts(t) for t in given])
    taken = _ts_canonical(given)
    assert taken is None or taken == framed
    assert (taken is not None) == (framed == [t.encode() for t in given])
