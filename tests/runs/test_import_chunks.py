"""A file of many chunks (RECKON_IMPORT_CHUNK, 7 here) stores the same events, chain and rejections
as the same file read whole (``log_parse``): the chunk boundaries change nothing a reader sees."""

import io

import pytest

from runs.chain import chain_verify
from runs.importer import log_import_stream, log_parse, paths_import
from runs.models import Run
from runs.store import events_read
from tests.golden import fixture_logs
from tests.runs.helpers import good, line, nothing_stored

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def small_chunks(settings):
    settings.RECKON_IMPORT_CHUNK = 7


def imported(data: str, name="run-x.jsonl"):
    return log_import_stream(name, io.BytesIO(data.encode()))


def test_a_file_of_many_chunks_stores_exactly_the_events_a_whole_read_makes(tmp_path):
    from bench.scale_log import log_write

    path = tmp_path / "run-long.jsonl"
    log_write(path, events=300)  # starts, completions, model turns and a compaction, in 43 chunks
    [result] = paths_import([str(path)])
    assert (result.outcome, result.appended) == ("imported", 300)
    expected = log_parse(str(path), path.read_bytes()).events  # checked in this process, whole
    assert [tuple(e) for e in events_read(run_id="run-long")] == [tuple(e) for e in expected]
    problem, last, head = chain_verify(run_id="run-long")
    assert problem is None and last == 300 and bytes(Run.objects.get(run_id="run-long").head) == head


def test_every_fixture_log_in_chunks_is_imported_as_it_is_read_whole(tmp_path):
    results = paths_import([str(p) for p in fixture_logs()])
    assert all(r.outcome == "imported" for r in results), [r.line() for r in results]
    for r in results:
        with open(r.path, "rb") as f:
            expected = log_parse(r.path, f.read()).events
        assert [tuple(e) for e in events_read(run_id=r.run_id)] == [tuple(e) for e in expected], r.path
        problem, last, head = chain_verify(run_id=r.run_id)
        assert problem is None and last == r.last_seq
        assert bytes(Run.objects.get(run_id=r.run_id).head) == head


def test_a_rejection_in_the_last_line_of_a_file_of_many_chunks_leaves_nothing():
    data = good("run-x", n=500) + line(501, "user_message", {"content": "x", "dup": 1}).replace('"dup": 1', '"dup": 1, "dup": 2')
    result = imported(data)
    assert result.outcome == "rejected" and result.reason.startswith("line 501: payload.dup appears twice"), result.reason
    assert nothing_stored()


def test_a_gap_after_many_chunks_is_rejected_naming_its_line():
    result = imported(good("run-x", n=60) + line(62, "user_message", {"content": "gap"}))
    assert result.outcome == "rejected" and "line 61: seq 62 where 61 was expected (a gap)" in result.reason
    assert nothing_stored()


def test_a_torn_tail_after_many_chunks_is_reported_and_the_rest_imported():
    data = good("run-x", n=50) + '{"seq": 51, "type": "user_mess'
    result = imported(data)
    assert (result.outcome, result.appended, result.last_seq, result.torn_line) == ("imported", 50, 50, 51)
    assert Run.objects.get(run_id="run-x").last_seq == 50


def test_every_chunk_of_a_log_is_written_in_order_and_chained(tmp_path):
    from bench.scale_log import log_write

    path = tmp_path / "run-long.jsonl"
    log_write(path, events=70)
    [result] = paths_import([str(path)])
    assert (result.outcome, result.appended) == ("imported", 70)
    expected = log_parse(str(path), path.read_bytes()).events
    assert [tuple(e) for e in events_read(run_id="run-long")] == [tuple(e) for e in expected]
    problem, last, head = chain_verify(run_id="run-long")
    assert problem is None and last == 70 and bytes(Run.objects.get(run_id="run-long").head) == head


@pytest.mark.parametrize("stored", [20, 21, 28])
def test_an_extension_in_chunks_appends_the_tail_as_a_whole_read_does(stored):
    # The run holds a prefix ending inside a chunk (20), at a chunk's first line (21) or at a
    # chunk's end (28): the chunk holding the first new event is written from that event on.
    full = good("run-x", n=60)
    first = imported("".join(full.splitlines(keepends=True)[:stored]))
    assert (first.outcome, first.last_seq) == ("imported", stored)
    result = imported(full)
    assert (result.outcome, result.first_seq, result.last_seq) == ("extended", stored + 1, 60), result.line()
    expected = log_parse("run-x.jsonl", full.encode()).events
    assert [tuple(e) for e in events_read(run_id="run-x")] == [tuple(e) for e in expected]
    problem, last, _ = chain_verify(run_id="run-x")
    assert problem is None and last == 60


def test_an_event_the_store_refuses_in_a_later_chunk_rejects_the_whole_file():
    # Two tenants for one call: a rule of the store's, not of the line check, met in the sixth
    # chunk; the message is the store's, naming the seq.
    bad = line(40, "tool_call_started", {"call_id": "c1", "name": "post", "arguments": {"tenant": "b"}, "tenant": "a"})
    data = good("run-x", n=39) + bad + "".join(line(s, "user_message", {"content": "x"}) for s in range(41, 50))
    result = imported(data)
    assert result.outcome == "rejected"
    assert "(seq 40, tool_call_started)" in result.reason and "tenant 'a' but its arguments name tenant 'b'" in result.reason, result.reason
    assert nothing_stored()


def test_sealed_values_in_later_chunks_are_chained_as_commitments():
    from recovery.masking import sealed_fields_forget
    from recovery.models import ToolPolicy
    from runs.models import EventSeal

    ToolPolicy.objects.create(tool="post_correction", risk_class="irreversible", strategy="escalate", sensitive_fields=["account"])
    sealed_fields_forget()  # the policy just written names the sealed fields
    calls = "".join(line(s, "tool_call_started", {"call_id": f"c{s}", "name": "post_correction", "arguments": {"account": f"A-{s}"}}) for s in range(31, 36))
    data = good("run-x", n=30) + calls
    result = imported(data)
    assert result.outcome == "imported"
    assert sorted(EventSeal.objects.filter(run_id="run-x").values_list("seq", flat=True)) == list(range(31, 36))
    problem, last, _ = chain_verify(run_id="run-x")
    assert problem is None and last == 35


@pytest.mark.parametrize("early", [False, True])
def test_chunks_store_each_time_as_an_append_writes_it(early):
    # Whole seconds, fractions, and (``early``) a year before 1000 in every chunk, whose text in the
    # chain's frame is not RFC 3339's: the rows hold the same times, in the same text, as the
    # store's own formatting of each one (SQLite keeps a time as text).
    from django.db import connection

    times = ["2026-09-08T11:00:00Z", "2026-09-08T11:00:00.000001Z", "2026-09-08T11:00:00.250000Z"] + (["0999-01-02T03:04:05.000000Z"] if early else [])
    data = line(1, "run_started", {"run_id": "run-x"}) + "".join(line(s, "user_message", {"content": f"m{s}"}, ts=times[s % len(times)]) for s in range(2, 40))
    result = imported(data)
    assert result.outcome == "imported"
    expected = log_parse("run-x.jsonl", data.encode()).events
    assert [tuple(e) for e in events_read(run_id="run-x")] == [tuple(e) for e in expected]
    with connection.cursor() as cur:
        cur.execute("SELECT CAST(ts AS TEXT) FROM reckon_event WHERE run_id = %s ORDER BY seq", ["run-x"])
        stored = [row[0] for row in cur.fetchall()]
    if connection.vendor == "sqlite":
        assert stored == [connection.ops.adapt_datetimefield_value(e.ts) for e in expected]
    problem, last, _ = chain_verify(run_id="run-x")
    assert problem is None and last == 39
