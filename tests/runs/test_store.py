"""The append contract, written once and run on every backend (SQLite by default, PostgreSQL in
CI's second pass): fencing by epoch and expected seq, atomic batches, takeover after expiry."""

import json
import time
from datetime import datetime, timezone

import pytest
from django.db import connection

from runs.events import CURRENT_SCHEMA_VERSION
from runs.errors import InvalidEvent, LeaseHeld, RunFinished, RunNotFound, SeqConflict, StaleEpoch
from runs.leases import db_now, lease_acquire, lease_release, lease_renew, leases_release
from runs.models import AppendOnlyError, Event, LeaseRecord, Run
from runs.selectors import run_state
from runs.store import NewEvent, events_append, events_load, events_read, events_replay

pytestmark = pytest.mark.django_db(transaction=True)


def started(run_id, holder="worker-a", ttl=30):
    lease = lease_acquire(run_id=run_id, holder=holder, ttl_seconds=ttl)
    events_append(run_id=run_id, epoch=lease.epoch, expected_seq=0, events=[NewEvent("run_started", {"run_id": run_id})])
    return lease


def msg(text="hello"):
    return NewEvent("user_message", {"content": text})


def stored(run_id):
    return [(e.seq, e.type) for e in events_read(run_id=run_id)]


def test_it_appends_with_the_current_epoch_and_expected_seq():
    lease = started("r1")
    out = events_append(run_id="r1", epoch=lease.epoch, expected_seq=1, events=[msg("a"), msg("b")])
    assert [e.seq for e in out] == [2, 3]
    assert stored("r1") == [(1, "run_started"), (2, "user_message"), (3, "user_message")]
    assert Run.objects.get(run_id="r1").last_seq == 3
    assert set(Event.objects.filter(run_id="r1").values_list("epoch", flat=True)) == {lease.epoch}
    assert run_state(run_id="r1").messages[-1].content == "b"


def test_it_rejects_a_stale_epoch_naming_both_values_and_writes_nothing():
    lease = started("r1", ttl=0.2)
    time.sleep(0.35)
    newer = lease_acquire(run_id="r1", holder="worker-b")
    assert newer.epoch == lease.epoch + 1
    with pytest.raises(StaleEpoch) as exc:
        events_append(run_id="r1", epoch=lease.epoch, expected_seq=1, events=[msg()])
    assert f"epoch {lease.epoch}" in str(exc.value) and f"current epoch {newer.epoch}" in str(exc.value)
    assert exc.value.current_epoch == newer.epoch and exc.value.last_seq == 1
    assert stored("r1") == [(1, "run_started")]
    assert LeaseRecord.objects.filter(run_id="r1", kind="fenced", epoch=lease.epoch).exists()


def test_it_rejects_a_wrong_expected_seq_naming_both_values_and_writes_nothing():
    lease = started("r1")
    with pytest.raises(SeqConflict) as exc:
        events_append(run_id="r1", epoch=lease.epoch, expected_seq=0, events=[NewEvent("run_started", {"run_id": "r1"})])
    assert "expected 0" in str(exc.value) and "last seq is 1" in str(exc.value)
    with pytest.raises(SeqConflict):
        events_append(run_id="r1", epoch=lease.epoch, expected_seq=5, events=[msg()])
    assert stored("r1") == [(1, "run_started")]


def test_a_batch_is_atomic_when_one_event_is_invalid():
    lease = started("r1")
    with pytest.raises(InvalidEvent, match="lacks content"):
        events_append(run_id="r1", epoch=lease.epoch, expected_seq=1, events=[msg("a"), NewEvent("user_message", {})])
    with pytest.raises(InvalidEvent, match="unknown event type 'mystery'"):
        events_append(run_id="r1", epoch=lease.epoch, expected_seq=1, events=[msg("a"), NewEvent("mystery", {})])
    with pytest.raises(InvalidEvent, match="NUL"):
        events_append(run_id="r1", epoch=lease.epoch, expected_seq=1, events=[msg("a"), msg("bad\x00byte")])
    assert stored("r1") == [(1, "run_started")] and Run.objects.get(run_id="r1").last_seq == 1


def test_a_batch_is_atomic_when_the_database_refuses_part_of_it():
    """Bypass the fence by moving last_seq back: the unique (run, seq) constraint must reject the
    whole batch, not keep the rows before the duplicate."""
    lease = started("r1")
    events_append(run_id="r1", epoch=lease.epoch, expected_seq=1, events=[msg("a")])
    Run.objects.filter(run_id="r1").update(last_seq=0)
    from django.db import IntegrityError

    with pytest.raises((IntegrityError, InvalidEvent)):
        events_append(run_id="r1", epoch=lease.epoch, expected_seq=0, events=[NewEvent("run_started", {"run_id": "r1"}), msg("x")])
    assert stored("r1") == [(1, "run_started"), (2, "user_message")]


def test_takeover_happens_only_after_expiry_by_the_database_clock():
    lease = started("r1", ttl=30)
    with pytest.raises(LeaseHeld) as exc:
        lease_acquire(run_id="r1", holder="worker-b")
    assert "worker-a" in str(exc.value)
    assert exc.value.expires_at > db_now()
    Run.objects.filter(run_id="r1").update(lease_expires_at=db_now())  # expire it now, by the same clock
    b = lease_acquire(run_id="r1", holder="worker-b")
    assert b.epoch == lease.epoch + 1 and b.last_seq == 1
    kinds = list(LeaseRecord.objects.filter(run_id="r1").order_by("id").values_list("kind", flat=True))
    assert kinds == ["acquired", "refused", "takeover"]
    events_append(run_id="r1", epoch=b.epoch, expected_seq=1, events=[msg()])
    assert stored("r1")[-1] == (2, "user_message")


def test_renew_extends_the_current_lease_and_refuses_a_stale_one():
    lease = started("r1", ttl=1)
    renewed = lease_renew(run_id="r1", epoch=lease.epoch, ttl_seconds=60)
    assert renewed.expires_at > lease.expires_at
    with pytest.raises(StaleEpoch):
        lease_renew(run_id="r1", epoch=lease.epoch + 1)


def test_release_lets_the_next_writer_in_at_once_and_fences_the_releaser():
    lease = started("r1", ttl=60)
    lease_release(run_id="r1", epoch=lease.epoch)
    with pytest.raises(StaleEpoch, match="was released"):
        events_append(run_id="r1", epoch=lease.epoch, expected_seq=1, events=[msg()])
    nxt = lease_acquire(run_id="r1", holder="worker-b")
    assert nxt.epoch == lease.epoch + 1
    kinds = list(LeaseRecord.objects.filter(run_id="r1").order_by("id").values_list("kind", flat=True))
    assert kinds == ["acquired", "released", "fenced", "acquired"]


def test_leases_given_back_together_are_each_released_and_recorded_in_order_and_a_stale_one_refused():
    leases = [started(r, ttl=60) for r in ("r1", "r2", "r3")]
    leases_release([(lease.run_id, lease.epoch) for lease in reversed(leases)])
    assert set(Run.objects.values_list("lease_holder", flat=True)) == {""}
    released = list(LeaseRecord.objects.filter(kind="released").order_by("id").values_list("run_id", "epoch"))
    assert released == [("r3", leases[2].epoch), ("r2", leases[1].epoch), ("r1", leases[0].epoch)]
    nxt = lease_acquire(run_id="r1", holder="worker-b")
    with pytest.raises(StaleEpoch):
        leases_release([("r1", nxt.epoch), ("r2", leases[1].epoch)])  # r2's lease was given back already
    assert LeaseRecord.objects.filter(kind="released").count() == 4  # r1's, then the refusal


def test_a_second_run_finished_is_refused():
    lease = started("r1")
    events_append(run_id="r1", epoch=lease.epoch, expected_seq=1, events=[NewEvent("run_finished", {"outcome": "completed"})])
    with pytest.raises(RunFinished, match="already finished at seq 2"):
        events_append(run_id="r1", epoch=lease.epoch, expected_seq=2, events=[msg(), NewEvent("run_finished", {"outcome": "again"})])
    assert stored("r1") == [(1, "run_started"), (2, "run_finished")]
    # Recovery facts may still follow a finished run.
    events_append(run_id="r1", epoch=lease.epoch, expected_seq=2, events=[NewEvent("operator_note", {"by": "dana", "text": "checked"})])


AGENTS_OWN = {
    "a model turn": NewEvent("model_turn", {"text": "again", "tool_calls": []}),
    "a message": msg("one more thing"),
    "a tool call's start": NewEvent("tool_call_started", {"call_id": "c9", "name": "post_note", "arguments": {"n": 1}}),
    "a live completion": NewEvent("tool_call_completed", {"call_id": "c1", "name": "post_note", "content": "ok", "is_error": False, "idempotency_key": "k-c1"}),
    "a resumption": NewEvent("run_resumed", {"epoch": 1, "holder": "agent", "after_seq": 3}),
    "the agent's own question": NewEvent("approval_requested", {"call_id": "c9", "question": "go on?"}),
}


@pytest.mark.parametrize("what", sorted(AGENTS_OWN))
def test_a_finished_run_refuses_the_agents_own_work_and_writes_nothing(what):
    # An agent that opens a finished run again must not run a tool under it: its start is refused
    # before the tool runs, as is any other event that is the agent's own work.
    lease = started("r1")
    call = {"call_id": "c1", "name": "post_note", "arguments": {"n": 0}}
    events_append(run_id="r1", epoch=lease.epoch, expected_seq=1, events=[NewEvent("tool_call_started", call), _finish()])
    with pytest.raises(RunFinished, match=r"already finished at seq 3; an agent's own events \(turns, messages, tool calls and their live results\) are refused after its end"):
        events_append(run_id="r1", epoch=lease.epoch, expected_seq=3, events=[AGENTS_OWN[what]])
    assert stored("r1") == [(1, "run_started"), (2, "tool_call_started"), (3, "run_finished")]
    assert Run.objects.get(run_id="r1").last_seq == 3
    # In one append with the end itself, the agent's work after the end is refused too.
    with pytest.raises(InvalidEvent, match=r"event 1 \(seq 3, .*\): the run finishes at seq 2; an agent's own events"):
        events_append(run_id="r2", epoch=started("r2").epoch, expected_seq=1, events=[_finish(), AGENTS_OWN[what]])
    assert stored("r2") == [(1, "run_started")]


def test_a_finished_run_still_takes_what_recovery_and_people_write_about_its_calls():
    lease = started("r1")
    call = {"call_id": "c1", "name": "post_note", "arguments": {"n": 0}, "idempotency_key": "k-c1"}
    events_append(run_id="r1", epoch=lease.epoch, expected_seq=1, events=[NewEvent("tool_call_started", call), _finish()])
    about = {"call_id": "c1", "idempotency_key": "k-c1", "start_seq": 2}
    after = [
        NewEvent("tool_call_uncertain", {**about, "reason": "the run ended with the call in flight"}),
        NewEvent("reconciliation_attempted", {**about, "attempt": 1, "outcome": "absent", "evidence": {}, "error": "", "rule": "r"}),
        NewEvent("approval_requested", {**about, "question": "did it happen?", "reason": "policy"}),
        NewEvent("approval_decided", {**about, "approved": True, "by": "dana", "reason": "retry", "decision": "retry_same_key"}),
        NewEvent("tool_call_started", {**call, "retry_of": 2}),
        NewEvent("tool_call_completed", {"call_id": "c1", "name": "post_note", "content": "ok", "is_error": False, "idempotency_key": "k-c1", "source": "retry"}),
        NewEvent("tool_call_resolved", {**about, "disposition": "retried", "by": "dana"}),
        NewEvent("operator_note", {**about, "by": "dana", "text": "retried once"}),
    ]
    events_append(run_id="r1", epoch=lease.epoch, expected_seq=3, events=after)
    assert [t for _, t in stored("r1")][3:] == [e.type for e in after]



def _finish(outcome="completed"):
    return NewEvent("run_finished", {"outcome": outcome})


def _unchanged(run_id, before):
    run = Run.objects.get(run_id=run_id)
    return stored(run_id) == before and (run.last_seq, run.finished_seq) == (len(before), None)


@pytest.mark.parametrize("shape", ["alone", "in a batch"])
def test_the_finishing_append_is_fenced_by_epoch_expected_seq_and_holder_and_writes_nothing_when_refused(shape):
    """The append that ends a run takes its own statement (it also sets the run's terminal seq):
    the fence of that statement, not only of the ordinary one, refuses a stale epoch, an expected
    seq behind or ahead of the log, and a released lease, and nothing of the batch is written."""
    lease = started("r1")
    events_append(run_id="r1", epoch=lease.epoch, expected_seq=1, events=[msg("a"), msg("b")])
    before = stored("r1")

    def finishing():
        return [_finish()] if shape == "alone" else [msg("last words"), _finish()]

    for expected in (1, 2, 4, 10):
        with pytest.raises(SeqConflict) as exc:
            events_append(run_id="r1", epoch=lease.epoch, expected_seq=expected, events=finishing())
        assert exc.value.expected_seq == expected and exc.value.last_seq == 3
        assert _unchanged("r1", before), expected
    lease_release(run_id="r1", epoch=lease.epoch)
    with pytest.raises(StaleEpoch) as exc:
        events_append(run_id="r1", epoch=lease.epoch, expected_seq=3, events=finishing())
    assert "was released" in str(exc.value)
    assert _unchanged("r1", before)
    newer = lease_acquire(run_id="r1", holder="worker-b", ttl_seconds=30)
    with pytest.raises(StaleEpoch) as exc:
        events_append(run_id="r1", epoch=lease.epoch, expected_seq=3, events=finishing())
    assert exc.value.current_epoch == newer.epoch
    assert _unchanged("r1", before)
    # The current holder, at the log's last seq, finishes the run.
    out = events_append(run_id="r1", epoch=newer.epoch, expected_seq=3, events=finishing())
    assert Run.objects.get(run_id="r1").finished_seq == out[-1].seq == len(before) + len(out)

def test_a_single_event_is_fenced_like_a_batch_at_any_seq():
    lease = started("r1")
    events_append(run_id="r1", epoch=lease.epoch, expected_seq=1, events=[NewEvent("run_finished", {"outcome": "completed"})])
    with pytest.raises(RunFinished, match="already finished at seq 2"):
        events_append(run_id="r1", epoch=lease.epoch, expected_seq=2, events=[NewEvent("run_finished", {"outcome": "again"})])
    with pytest.raises(SeqConflict):
        events_append(run_id="r1", epoch=lease.epoch, expected_seq=1, events=[msg()])
    # Past 32-bit seqs, the fence and the row keep counting (set up by moving the run's last seq;
    # the run has finished, so the event is one a person may still write).
    far = 2**31 - 1
    Run.objects.filter(run_id="r1").update(last_seq=far)
    out = events_append(run_id="r1", epoch=lease.epoch, expected_seq=far, events=[NewEvent("operator_note", {"by": "dana", "text": "far"})])
    assert out[0].seq == far + 1 and Run.objects.get(run_id="r1").last_seq == far + 1
    assert [(e.seq, e.payload["text"]) for e in events_read(run_id="r1", after=far)] == [(far + 1, "far")]


def test_a_run_begins_with_its_own_run_started_and_has_it_only_once():
    lease = lease_acquire(run_id="r1", holder="a")
    with pytest.raises(InvalidEvent, match="begins with run_started"):
        events_append(run_id="r1", epoch=lease.epoch, expected_seq=0, events=[msg()])
    with pytest.raises(InvalidEvent, match="names run 'other'"):
        events_append(run_id="r1", epoch=lease.epoch, expected_seq=0, events=[NewEvent("run_started", {"run_id": "other"})])
    events_append(run_id="r1", epoch=lease.epoch, expected_seq=0, events=[NewEvent("run_started", {"run_id": "r1"})])
    with pytest.raises(InvalidEvent, match="only there"):
        events_append(run_id="r1", epoch=lease.epoch, expected_seq=1, events=[NewEvent("run_started", {"run_id": "r1"})])


def test_appending_to_a_missing_run_names_it():
    with pytest.raises(RunNotFound, match="'ghost'"):
        events_append(run_id="ghost", epoch=1, expected_seq=0, events=[NewEvent("run_started", {"run_id": "ghost"})])


def test_the_writer_stores_the_current_schema_version_with_defaults_filled():
    lease = started("r1")
    events_append(
        run_id="r1",
        epoch=lease.epoch,
        expected_seq=1,
        events=[NewEvent("tool_call_started", {"call_id": "c1", "name": "post", "arguments": {"tenant": "acme"}})],
    )
    row = Event.objects.get(run_id="r1", seq=2)
    # Version 3: the operation id defaults to the recorded key, and a start that records none gets
    # null there, not a key computed without the run's secret (which anyone could recompute).
    assert row.v == CURRENT_SCHEMA_VERSION == 4 and row.payload["tenant"] == "acme" and row.payload["operation_id"] is None
    assert len(Event.objects.get(run_id="r1", seq=1).payload["key_secret"]) == 32


def test_no_code_path_updates_or_deletes_an_event():
    started("r1")
    row = Event.objects.get(run_id="r1", seq=1)
    with pytest.raises(AppendOnlyError):
        row.save()
    with pytest.raises(AppendOnlyError):
        row.delete()


@pytest.mark.postgres
def test_on_postgres_the_database_itself_rejects_update_and_delete():
    from django.db import IntegrityError, transaction

    started("r1")
    for sql in ("UPDATE reckon_event SET type = 'x'", "DELETE FROM reckon_event"):
        with pytest.raises(IntegrityError, match="append-only"):
            with transaction.atomic(), connection.cursor() as cur:
                cur.execute(sql)
    assert stored("r1") == [(1, "run_started")]


def test_a_batch_names_the_event_whose_payload_json_cannot_hold():
    lease = started("r1")
    for bad in (float("nan"), object(), datetime(2026, 1, 1, tzinfo=timezone.utc)):
        with pytest.raises(InvalidEvent, match="event 2: payload is not storable JSON"):
            events_append(run_id="r1", epoch=lease.epoch, expected_seq=1, events=[msg("a"), msg("b"), NewEvent("user_message", {"content": bad})])
    assert stored("r1") == [(1, "run_started")] and Run.objects.get(run_id="r1").last_seq == 1


def test_a_batch_is_stored_as_written_with_each_events_own_time():
    lease = started("r1")
    t1, t2 = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=timezone.utc), datetime(2026, 3, 1, 12, 0, 5, tzinfo=timezone.utc)
    payload = {"content": "Grüße, \"quoted\" \\ back-slashed, ✓", "z": None, "a": [1, 2.5, {"k": True}], "n": 2**53}
    events_append(run_id="r1", epoch=lease.epoch, expected_seq=1, events=[NewEvent("user_message", payload, t1), NewEvent("user_message", {"content": "x"}, t2), msg("now")])
    rows = list(Event.objects.filter(run_id="r1", seq__gt=1).order_by("seq").values_list("seq", "ts", "payload"))
    assert [(s, ts) for s, ts, _ in rows[:2]] == [(2, t1), (3, t2)] and rows[0][2] == payload
    with connection.cursor() as cur:
        cur.execute("SELECT payload FROM reckon_event WHERE run_id = %s AND seq = 2", ["r1"])
        text = cur.fetchone()[0]
    if not isinstance(text, str):  # psycopg decodes a json column; ask for its text instead
        with connection.cursor() as cur:
            cur.execute("SELECT payload::text FROM reckon_event WHERE run_id = %s AND seq = 2", ["r1"])
            text = cur.fetchone()[0]
    # Escapes and spacing exactly as the writer's compact encoding, keys sorted (the text the chain's
    # digest is taken over, runs.canonical): nothing re-serialised by the database.
    assert text == '{"a":[1,2.5,{"k":true}],"content":"Grüße, \\"quoted\\" \\\\ back-slashed, ✓","n":9007199254740992,"z":null}'
    assert events_load(run_id="r1")[1].payload == payload


def test_an_integer_beyond_64_bits_is_refused_by_name_and_nothing_is_written():
    lease = started("r1")
    with pytest.raises(InvalidEvent, match="event 1: payload is not storable JSON"):
        events_append(run_id="r1", epoch=lease.epoch, expected_seq=1, events=[msg("a"), NewEvent("user_message", {"content": "x", "n": 2**70})])
    assert stored("r1") == [(1, "run_started")]


def test_a_payload_with_non_string_keys_is_stored_with_string_keys_as_json_has_them():
    lease = started("r1")
    events_append(run_id="r1", epoch=lease.epoch, expected_seq=1, events=[msg("a"), NewEvent("memory_written", {"key": "k", "value": {1: "one", 2: None}})])
    assert events_read(run_id="r1")[-1].payload == {"key": "k", "value": {"1": "one", "2": None}}


def test_a_stored_number_orjson_cannot_read_is_read_with_json_and_the_rest_unchanged():
    # The store refuses such a payload on the way in; a row written some other way (an older
    # version, a manual repair) must still replay. Written here past the append path on purpose.
    lease = started("r1")
    events_append(run_id="r1", epoch=lease.epoch, expected_seq=1, events=[msg("a")])
    with connection.cursor() as cur:
        cur.execute(
            "INSERT INTO reckon_event (run_id, seq, type, v, ts, payload, epoch, recorded_at) VALUES (%s, 3, 'user_message', 2, %s, %s, %s, %s)",
            ["r1", datetime(2026, 1, 1, tzinfo=timezone.utc), '{"content": "far", "x": 1e400}', lease.epoch, datetime(2026, 1, 1, tzinfo=timezone.utc)],
        )
    events = events_read(run_id="r1")
    assert [(e.seq, e.type, e.payload.get("content")) for e in events] == [(1, "run_started", None), (2, "user_message", "a"), (3, "user_message", "far")]
    assert events[2].payload["x"] == float("inf") and events[2].ts == datetime(2026, 1, 1, tzinfo=timezone.utc)
    assert events[1] == events_read(run_id="r1", after=1, upto=2)[0]
    # The replay's reader falls back the same way (a user message's timestamp is not read).
    assert list(events_replay(run_id="r1")) == [(e.seq, e.type, e.payload, None, e.v) for e in events_load(run_id="r1")]
    assert run_state(run_id="r1").messages[-1].content == "far"


@pytest.mark.postgres
def test_on_postgres_a_single_append_survives_its_statement_being_deallocated_in_and_out_of_a_transaction():
    from django.db import transaction

    from runs.pg import round_trips_count, server_cursor

    lease = started("r1")
    at = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=timezone.utc)
    events_append(run_id="r1", epoch=lease.epoch, expected_seq=1, events=[NewEvent("user_message", {"content": "a"}, at)])
    # Prepared and sent directly: one round trip, the time stored to the microsecond.
    assert round_trips_count(lambda: events_append(run_id="r1", epoch=lease.epoch, expected_seq=2, events=[msg("b")])) == 1
    # psycopg forgets every prepared statement on a rollback (DEALLOCATE ALL, once it holds one
    # of its own): the next single append inside a transaction must not use a statement the
    # server no longer holds.
    with server_cursor() as cur:
        cur.execute("SELECT 1", prepare=True)
    with pytest.raises(RuntimeError), transaction.atomic():
        assert Run.objects.filter(run_id="r1").exists()
        events_append(run_id="r1", epoch=lease.epoch, expected_seq=3, events=[msg("rolled back")])
        raise RuntimeError
    with transaction.atomic():
        assert Run.objects.filter(run_id="r1").exists()  # the transaction has begun
        events_append(run_id="r1", epoch=lease.epoch, expected_seq=3, events=[msg("c")])
    # Behind psycopg's back (nothing tells it): in autocommit the append prepares it again.
    connection.connection.pgconn.exec_(b"DEALLOCATE ALL")
    events_append(run_id="r1", epoch=lease.epoch, expected_seq=4, events=[msg("d")])
    assert [e.payload["content"] for e in events_read(run_id="r1")[1:]] == ["a", "b", "c", "d"]
    assert Event.objects.get(run_id="r1", seq=2).ts == at


@pytest.mark.postgres
def test_on_postgres_a_single_append_of_values_the_direct_path_does_not_send_takes_the_cursor():
    lease = started("r1")
    # An integer beyond int8 in the fence's parameters: psycopg's own error, as before.
    with pytest.raises(Exception, match="out of range|too large|overflow"):
        events_append(run_id="r1", epoch=2**70, expected_seq=1, events=[msg()])
    # A naive time is sent by the cursor as a timestamp, and stored as before.
    naive = datetime(2026, 3, 1, 12, 0, 0)
    events_append(run_id="r1", epoch=lease.epoch, expected_seq=1, events=[NewEvent("user_message", {"content": "x"}, naive)])
    assert stored("r1") == [(1, "run_started"), (2, "user_message")]


@pytest.mark.postgres
def test_on_postgres_a_streamed_replay_crosses_its_ranges_and_fetches_and_gives_the_chunked_replays_events(monkeypatch):
    import runs.store_read as store

    lease = started("r1")
    events_append(run_id="r1", epoch=lease.epoch, expected_seq=1, events=[msg(f"m{i}") for i in range(11)])
    monkeypatch.setattr(store, "_STREAMING", False)
    chunked = list(events_replay(run_id="r1", chunk=4))
    assert [row[0] for row in chunked] == list(range(1, 13))
    monkeypatch.setattr(store, "_STREAMING", True)
    for range_, fetch, upto in [(100_000, 256, None), (5, 2, None), (4, 3, None), (12, 5, None), (3, 1, 7), (5, 2, 10)]:
        monkeypatch.setattr(store, "_REPLAY_RANGE", range_)
        want = chunked if upto is None else chunked[:upto]
        assert list(events_replay(run_id="r1", upto=upto, chunk=fetch)) == want, (range_, fetch, upto)
    assert run_state(run_id="r1").messages[-1].content == "m10"


@pytest.mark.postgres
def test_on_postgres_a_replay_abandoned_midway_leaves_the_callers_transaction_usable(monkeypatch):
    from django.db import transaction

    import runs.store_read as store

    lease = started("r1")
    # 24 MB of payloads: more than the socket holds, so the server is still sending when the
    # replay stops.
    filler = "x" * 4000
    for at in range(1, 6001, 500):
        events_append(run_id="r1", epoch=lease.epoch, expected_seq=at, events=[msg(f"m{i} {filler}") for i in range(500)])
    monkeypatch.setattr(store, "_STREAMING", True)
    with transaction.atomic():
        Run.objects.filter(run_id="r1").update(source_file="replayer")
        rows = events_replay(run_id="r1", chunk=1)  # one row a fetch: most of the range still unread
        assert [next(rows)[0] for _ in range(3)] == [1, 2, 3]
        rows.close()  # what a fold that raises does to it
        # The statement was read to its end, not cancelled: the transaction goes on.
        assert Run.objects.get(run_id="r1").source_file == "replayer"
        events_append(run_id="r1", epoch=lease.epoch, expected_seq=6001, events=[msg("after")])
    assert run_state(run_id="r1").messages[-1].content == "after"
    assert Run.objects.get(run_id="r1").source_file == "replayer"


def test_an_import_whose_log_goes_on_after_its_end_is_rejected_naming_the_seq(tmp_path):
    from runs.importer import paths_import

    lines = [
        {"seq": 1, "type": "run_started", "ts": "2026-09-08T11:00:00Z", "payload": {"run_id": "run-late"}},
        {"seq": 2, "type": "run_finished", "ts": "2026-09-08T11:00:01Z", "payload": {"outcome": "completed"}},
        {"seq": 3, "type": "user_message", "ts": "2026-09-08T11:00:02Z", "payload": {"content": "one more"}},
    ]
    path = tmp_path / "run-late.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    (result,) = paths_import([str(path)])
    assert result.outcome == "rejected", result
    assert "event 2 (seq 3, user_message): the run finishes at seq 2; an agent's own events" in result.reason, result.reason
    assert stored("run-late") == []
