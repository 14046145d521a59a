"""An import keeps the start events of the calls in flight that the uncertain-call projection reads
back on every chunk (runs.store.rereads_kept): each is read from the database once, and the read
models come out as they would with every one read again."""

import io
from contextlib import nullcontext

import pytest

from recovery import rows as recovery_rows
from recovery.models import InFlightCall, UncertainCall
from recovery.rebuild import projections_rebuild
from recovery.rows import events_at
from runs import store
from runs.importer import log_import_stream
from runs.leases import lease_acquire
from runs.store import NewEvent, events_append, rereads_kept
from tests.runs.helpers import line

pytestmark = pytest.mark.django_db(transaction=True)


def _calls_log(run_id: str, calls: int = 40) -> str:
    """A run whose calls start one every three events: every third one stays in flight to the end,
    the others complete a few chunks after they started (their starts read back meanwhile)."""
    text = line(1, "run_started", {"run_id": run_id})
    seq, open_calls = 1, []
    for i in range(calls):
        args = {"tenant": "acme", "n": i}
        seq += 1
        text += line(seq, "tool_call_started", {"call_id": f"c{i}", "name": "post_note", "arguments": args, "idempotency_key": f"k{i}"})
        if i % 3:
            open_calls.append(i)
        seq += 1
        text += line(seq, "user_message", {"content": f"m{i}"})
        if len(open_calls) > 6:
            j = open_calls.pop(0)
            seq += 1
            text += line(seq, "tool_call_completed", {"call_id": f"c{j}", "name": "post_note", "content": {"ok": j}, "idempotency_key": f"k{j}"})
    return text


def _tables(run_id: str) -> tuple[list, list]:
    full = sorted((r.start_seq, r.call_id, r.idempotency_key, r.state, r.possible_duplicate, r.version, r.last_seq, r.arguments, r.tenant) for r in UncertainCall.objects.filter(run_id=run_id))
    narrow = sorted((r.start_seq, r.call_id, r.idempotency_key, r.tool, r.tenant, r.started_at, r.start_epoch) for r in InFlightCall.objects.filter(run_id=run_id))
    return full, narrow


@pytest.fixture
def reads(monkeypatch):
    """Every seq ``events_at`` reads from the database, in order."""
    read: list[int] = []
    real = recovery_rows._events_read_at

    def counted(run_id, seqs):
        read.extend(seqs)
        return real(run_id, seqs)

    monkeypatch.setattr(recovery_rows, "_events_read_at", counted)
    return read


def test_an_import_reads_each_start_in_flight_back_once_and_builds_the_read_models_of_a_rebuild(settings, reads):
    settings.RECKON_IMPORT_CHUNK = 5
    result = log_import_stream("run-kept.jsonl", io.BytesIO(_calls_log("run-kept").encode()))
    assert result.outcome == "imported", result.line()
    assert reads and len(reads) == len(set(reads))  # read back, and never the same start twice
    tables = _tables("run-kept")
    assert len(tables[1]) == 14 + 6  # every third call, and the six last still open
    projections_rebuild()
    assert _tables("run-kept") == tables


def test_without_the_kept_reads_the_same_import_reads_starts_again_and_builds_the_same_rows(settings, reads, monkeypatch):
    # The comparison the kept reads must pass: the same file, each start read again on every chunk.
    settings.RECKON_IMPORT_CHUNK = 5
    monkeypatch.setattr(store, "rereads_kept", lambda run_id: nullcontext())
    result = log_import_stream("run-kept.jsonl", io.BytesIO(_calls_log("run-kept").encode()))
    assert result.outcome == "imported", result.line()
    assert len(reads) > len(set(reads))
    tables = _tables("run-kept")
    projections_rebuild()
    assert _tables("run-kept") == tables


def test_kept_events_are_those_a_read_gives_and_a_change_to_one_given_out_never_reaches_the_next(reads):
    lease = lease_acquire(run_id="run-k", holder="t")
    events = [NewEvent("run_started", {"run_id": "run-k"})]
    events += [NewEvent("tool_call_started", {"call_id": f"c{i}", "name": "n", "arguments": {"i": i, "x": [1.5, None, "é"]}}) for i in range(4)]
    events_append(run_id="run-k", epoch=lease.epoch, expected_seq=0, events=events)
    plain = events_at(run_id="run-k", seqs=[2, 3, 4, 5])
    reads.clear()
    with rereads_kept("run-k"):
        first = events_at(run_id="run-k", seqs=[2, 3, 5])
        first[0].payload["arguments"]["i"] = "changed"
        assert events_at(run_id="run-k", seqs=[2, 3, 4, 5, 9]) == plain  # 9 is not stored
        assert events_at(run_id="run-k", seqs=[3]) == plain[1:2]  # kept now: what was asked last
        assert events_at(run_id="run-k", seqs=[2]) == plain[:1]  # let go, so read again
        with rereads_kept("run-other"):
            assert events_at(run_id="run-k", seqs=[2]) == plain[:1]  # another run's block keeps nothing of this one
    assert reads == [2, 3, 5, 4, 9, 2, 2]
    assert events_at(run_id="run-k", seqs=[2, 3, 5]) == [plain[0], plain[1], plain[3]] and reads[-3:] == [2, 3, 5]
