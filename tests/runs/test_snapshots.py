"""Snapshots are a cache of a partial fold: snapshot plus tail must equal the full replay, every check
that fails is a counted miss that falls back to event 1, a crash while writing leaves the previous
snapshot current, and deleting every snapshot never prevents recovery."""

import itertools
import os
import signal
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from django.db import connection
from django.test import override_settings
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from runs.events import COMPLETION_SOURCES, RESOLUTION_DISPOSITIONS, EventType, live_run_only
from runs.fold import Event, RunState, apply, fold
from reckon_client.identity import call_key
from runs.leases import lease_acquire
from runs.models import Snapshot, SnapshotPointer
from runs.selectors import run_state
from runs.snapshot_format import FOLD_CODE, FOLD_VERSION, body_digest, state_diff, state_dumps, state_loads
from runs.snapshot_verify import snapshot_verify
from runs.snapshots import _digest, run_state_fast, snapshot_current, snapshot_fold_write, snapshot_maybe, snapshot_policy_set, snapshot_write, version_quarantine
from runs.store import NewEvent, events_append
from tests.measure import Measurements
from tests.runs.helpers import more, working_run

ROOT = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 9, 8, 11, 0, tzinfo=timezone.utc)


# --- a strategy for valid logs of every registered type -------------------------------------------

CALL_IDS = ["c1", "c2", "c3"]
TOOLS = ["read_ledger", "post_correction"]
KEYS = ["k-a", "k-b"]
texts = st.text(alphabet="abcxyz £é", max_size=6)
json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), texts)


def _payload(kind, draw, seq, started):
    call_id = draw(st.sampled_from(CALL_IDS))
    if kind == "user_message":
        return {"content": draw(texts)}
    if kind == "model_turn":
        p = {"text": draw(texts), "usage": {"input_tokens": draw(st.integers(0, 900)), "output_tokens": draw(st.integers(0, 90))}}
        if draw(st.booleans()):
            p["tool_calls"] = [{"id": call_id, "name": draw(st.sampled_from(TOOLS)), "arguments": {"n": draw(st.integers(0, 3))}}]
        if draw(st.booleans()):
            p["cost_usd"] = draw(st.floats(0, 0.05, allow_nan=False, allow_infinity=False))
        return p
    if kind == "tool_call_started":
        args = {"n": draw(st.integers(0, 3))}
        if draw(st.booleans()):
            args["tenant"] = draw(st.sampled_from(["acme", "globex"]))
        name = draw(st.sampled_from(TOOLS))
        p = {"call_id": call_id, "name": name, "arguments": args}
        if draw(st.booleans()):
            p["idempotency_key"] = draw(st.sampled_from(KEYS))
        started.append(p.get("idempotency_key") or call_key("run-prop", name, args))
        return p
    if kind == "tool_call_completed":
        p = {"call_id": call_id, "name": draw(st.sampled_from(TOOLS)), "content": draw(json_scalars), "is_error": draw(st.booleans())}
        how = draw(st.sampled_from(["absent", "null", "known", "started"]))
        if how == "null":
            p["idempotency_key"] = None
        elif how == "known":
            p["idempotency_key"] = draw(st.sampled_from(KEYS))
        elif how == "started" and started:
            p["idempotency_key"] = draw(st.sampled_from(started))
        p["source"] = draw(st.sampled_from(COMPLETION_SOURCES))
        return p
    if kind == "approval_requested":
        return {"call_id": call_id, "question": draw(texts)}
    if kind == "approval_decided":
        return {"call_id": call_id, "approved": draw(st.booleans()), "by": "omar"}
    if kind == "guardrail_triggered":
        return {"rule": "pii", "severity": "WARN", "action": "redact"}
    if kind == "context_compacted":
        return {"summary": draw(texts), "kept": draw(st.integers(0, 4))}
    if kind == "memory_written":
        # A number as a memory key must survive the snapshot as a number, not become a string.
        return {"key": draw(st.sampled_from(["a", "b", 1, 2])), "value": draw(json_scalars)}
    if kind == "run_finished":
        return {"outcome": draw(st.sampled_from(["completed", "failed"]))}
    if kind == "run_resumed":
        return {"epoch": seq, "holder": "worker-b", "after_seq": seq - 1}
    if kind == "tool_call_uncertain":
        return {"call_id": call_id, "idempotency_key": draw(st.sampled_from(KEYS + started[-2:])), "start_seq": 1, "reason": "crash"}
    if kind == "reconciliation_attempted":
        return {"idempotency_key": draw(st.sampled_from(KEYS)), "attempt": 1, "outcome": draw(st.sampled_from(["match", "absent", "conflict", "unavailable"]))}
    if kind == "tool_call_resolved":
        return {"idempotency_key": draw(st.sampled_from(KEYS + started[-2:])), "disposition": draw(st.sampled_from(RESOLUTION_DISPOSITIONS)), "by": "omar"}
    if kind == "run_paused":
        return {"reason": "conflicting effect"}
    if kind == "operator_note":
        return {"by": "omar", "text": draw(texts)}
    raise AssertionError(f"the strategy does not know {kind}")


KINDS = [t.value for t in EventType if t is not EventType.RUN_STARTED]


@st.composite
def valid_logs(draw, max_events=30):
    """A valid run log: run_started, then any registered types, at most one run_finished, and after
    it none of the agent's own work (``runs.events.live_run_only``)."""
    run_id = "run-prop"
    events = [Event(1, "run_started", {"run_id": run_id}, T0, 2)]
    started: list[str] = []
    finished = False
    for _ in range(draw(st.integers(0, max_events))):
        kind = draw(st.sampled_from([k for k in KINDS if not (finished and k == "run_finished")]))
        seq = len(events) + 1
        ts = T0 + timedelta(seconds=3 * seq) if draw(st.booleans()) else f"2026-09-08T11:{seq % 60:02d}:00Z"
        payload = _payload(kind, draw, seq, started)
        if finished and live_run_only(kind, payload):
            continue
        finished = finished or kind == "run_finished"
        events.append(Event(seq, kind, payload, ts, 2))
    return events


@hsettings(max_examples=len(KINDS) * 2, deadline=None)
@given(data=st.data())
def test_the_strategy_covers_every_registered_type(data):
    for kind in KINDS:  # _payload raises for a type it does not know, so a new type fails here first
        _payload(kind, data.draw, 2, [])


@hsettings(max_examples=150, deadline=None)
@given(data=st.data())
def test_snapshot_plus_tail_equals_the_full_replay_for_any_log_and_snapshot_point(data):
    events = data.draw(valid_logs())
    k = data.draw(st.integers(0, len(events)), label="snapshot after seq")
    full = fold(events)
    restored = state_loads(state_dumps(fold(events[:k])))
    for ev in events[k:]:
        apply(restored, ev)
    assert state_diff(restored, full) == []
    for name in RunState.__dataclass_fields__:  # field by field, with order and types
        a, b = getattr(restored, name), getattr(full, name)
        assert a == b, name
        if isinstance(a, dict):
            assert list(a.items()) == list(b.items()), name
    assert restored.to_dict() == full.to_dict()


# --- the same property through the database -------------------------------------------------

_run_ids = itertools.count()


def stored_run(events, run_id):
    lease = lease_acquire(run_id=run_id, holder="worker-a", ttl_seconds=600)
    rows = [NewEvent(e.type, dict(e.payload, run_id=run_id) if e.type == "run_started" else e.payload, e.ts if isinstance(e.ts, datetime) else None) for e in events]
    events_append(run_id=run_id, epoch=lease.epoch, expected_seq=0, events=rows)
    return lease


@pytest.mark.django_db
@hsettings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_stored_snapshot_plus_tail_equals_the_full_replay_of_the_stored_log(data):
    events = data.draw(valid_logs(max_events=20))
    run_id = f"run-prop-{next(_run_ids)}"
    stored_run(events, run_id)
    k = data.draw(st.integers(1, len(events)), label="snapshot after seq")
    snapshot_write(run_id=run_id, state=run_state(run_id=run_id, at=k))
    full = run_state(run_id=run_id)
    fast = run_state_fast(run_id)
    assert state_diff(fast, full) == []
    assert fast.to_dict() == full.to_dict()
    assert SnapshotPointer.objects.get(run_id=run_id).snapshot_id == Snapshot.objects.get(run_id=run_id).id  # no miss


@pytest.mark.django_db
@hsettings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_first_snapshot_folded_chunk_by_chunk_is_the_body_the_full_replay_writes(data):
    # Chunks of 1 to 4 events: the completed calls and the trajectory leave the state as text many
    # times over, and the strategy's completions reuse a few keys, so keys come again across chunks.
    events = data.draw(valid_logs(max_events=30))
    run_id = f"run-prop-{next(_run_ids)}"
    stored_run(events, run_id)
    with override_settings(RECKON_READ_CHUNK=data.draw(st.integers(1, 4), label="read chunk")):
        snap = snapshot_fold_write(run_id=run_id, upto=len(events))
    assert snap.seq == len(events)
    assert snap.body == state_dumps(run_state(run_id=run_id))
    assert snap.digest == body_digest(snap.body)
    assert snapshot_verify(run_id=run_id).outcome == "equal"


@pytest.mark.django_db
def test_a_key_completed_again_chunks_later_keeps_its_first_place_and_its_last_value(settings):
    settings.RECKON_READ_CHUNK = 2
    run_id = "run-again"
    done = [("c1", "k-1", "first"), ("c2", "k-2", "second"), ("c3", "k-1", "again"), ("c4", "k-3", "third"), ("c5", "k-2", "last")]
    events = [Event(1, "run_started", {"run_id": run_id}, T0, 2)]
    for call_id, key, content in done:
        p = {"call_id": call_id, "name": "read_ledger", "content": content, "is_error": False, "idempotency_key": key}
        events.append(Event(len(events) + 1, "tool_call_completed", p, T0, 2))
    stored_run(events, run_id)
    snap = snapshot_fold_write(run_id=run_id, upto=len(events))
    full = run_state(run_id=run_id)
    assert list(full.completed_calls.items()) == [("k-1", "again"), ("k-2", "last"), ("k-3", "third")]
    assert snap.body == state_dumps(full)
    assert list(state_loads(snap.body).completed_calls.items()) == list(full.completed_calls.items())


def test_a_long_body_is_digested_in_slices_to_the_same_sha256():
    body = '{"x":"' + "é€𝄞a" * 700_000 + '"}'  # past a slice, with characters of 2, 3 and 4 bytes
    assert len(body) > 2 * (1 << 20)
    assert _digest(body) == body_digest(body)


# --- loading and its misses --------------------------------------------------------------------


_measured: Measurements | None = None


@pytest.fixture(autouse=True)
def _measurements():
    """``metric()`` reads what this test observed: the figures live as long as the processes."""
    global _measured
    _measured = Measurements()
    yield
    _measured = None


def metric(name, label=""):
    """The series ``name{label}`` since the test began (count, total, last, max), or None."""
    return _measured(name, label)


@pytest.mark.django_db
class TestLoading:
    def test_it_folds_only_the_tail_after_the_snapshot(self):
        working_run("run-a", 50)
        snap = snapshot_write(run_id="run-a", state=run_state(run_id="run-a", at=30))
        assert snap.seq == 30 and snap.fold_version == FOLD_VERSION and snap.fold_code == FOLD_CODE
        assert snap.digest == body_digest(snap.body)
        full = run_state(run_id="run-a").to_dict()
        measured = Measurements()
        fast = run_state_fast("run-a")
        assert fast.to_dict() == full
        assert measured("snapshot_seq_gap").last == 20
        assert measured("events_replayed").total == 20
        assert measured("snapshot_load_ms").count == 1
        assert measured.labels("snapshot_misses") == [] and measured.labels("full_replays") == []

    def test_a_state_asked_for_before_the_snapshot_is_folded_from_the_log(self):
        working_run("run-a", 50)
        snapshot_write(run_id="run-a", state=run_state(run_id="run-a", at=30))
        for at in (1, 29, 30, 31, 50):
            assert run_state_fast("run-a", at=at).to_dict() == run_state(run_id="run-a", at=at).to_dict()
        assert _measured.labels("snapshot_misses") == []
        assert metric("full_replays", "before_snapshot").count == 2  # at 1 and 29, before the snapshot at 30
        assert snapshot_current(run_id="run-a")[0].discarded_at is None

    def _miss(self, run_id, reason):
        full = run_state(run_id=run_id).to_dict()
        snap, _ = snapshot_current(run_id=run_id)
        assert run_state_fast(run_id).to_dict() == full
        assert metric("snapshot_misses", reason).total == 1
        assert metric("events_replayed").last == full["last_seq"]  # replayed from event 1
        if snap is not None:
            snap.refresh_from_db()
            assert snap.discarded_at is not None and snap.discard_reason.startswith(reason)
        assert not SnapshotPointer.objects.filter(run_id=run_id).exists()
        # Discarded, so the next read does not try it again (and does not count it again).
        assert run_state_fast(run_id).to_dict() == full
        assert metric("snapshot_misses", reason).total == 1

    def test_a_corrupt_digest_is_a_counted_miss_that_replays_from_event_1(self):
        working_run("run-a", 40)
        snap = snapshot_write(run_id="run-a", state=run_state(run_id="run-a", at=30))
        Snapshot.objects.filter(id=snap.id).update(body=snap.body.replace('"turns":', '"turns": '))
        self._miss("run-a", "digest")

    def test_an_unknown_snapshot_version_is_a_counted_miss(self):
        working_run("run-a", 40)
        snap = snapshot_write(run_id="run-a", state=run_state(run_id="run-a", at=30))
        Snapshot.objects.filter(id=snap.id).update(fold_version=FOLD_VERSION + 1)
        self._miss("run-a", "unknown_version")

    def test_a_snapshot_written_by_other_fold_code_is_an_unknown_version(self):
        working_run("run-a", 40)
        snap = snapshot_write(run_id="run-a", state=run_state(run_id="run-a", at=30))
        Snapshot.objects.filter(id=snap.id).update(fold_code="0" * 16)
        self._miss("run-a", "unknown_version")

    def test_a_tail_that_does_not_begin_right_after_the_snapshot_is_a_counted_miss(self):
        working_run("run-a", 40)
        snap = snapshot_write(run_id="run-a", state=run_state(run_id="run-a", at=30))
        # The row says 32, the body ends at 30: folding from 33 would skip events 31 and 32.
        Snapshot.objects.filter(id=snap.id).update(seq=32)
        self._miss("run-a", "gap")

    def test_a_snapshot_beyond_the_end_of_the_log_is_a_counted_miss(self):
        working_run("run-a", 40)
        working_run("run-b", 60)
        # As if the log had been restored from a backup older than the snapshot.
        st = run_state(run_id="run-b", at=55)
        st.run_id = "run-a"
        snapshot_write(run_id="run-a", state=st)
        self._miss("run-a", "gap")

    def test_a_quarantined_version_is_never_loaded(self):
        working_run("run-a", 40)
        snapshot_write(run_id="run-a", state=run_state(run_id="run-a", at=30))
        version_quarantine(fold_version=FOLD_VERSION, fold_code=FOLD_CODE, reason="test")
        self._miss("run-a", "quarantined")

    def test_deleting_every_snapshot_never_prevents_recovery(self):
        for run_id in ("run-a", "run-b"):
            working_run(run_id, 45)
            snapshot_write(run_id=run_id, state=run_state(run_id=run_id, at=40))
        expected = {r: run_state(run_id=r).to_dict() for r in ("run-a", "run-b")}
        with connection.cursor() as cur:
            cur.execute("DELETE FROM reckon_snapshot")  # by hand, behind the application's back
        assert SnapshotPointer.objects.count() == 2  # the pointers now name nothing
        for run_id, state in expected.items():
            assert run_state_fast(run_id).to_dict() == state
        assert metric("snapshot_misses", "missing").total == 2
        # And with pointers gone too, it is simply a full replay, not a miss.
        Snapshot.objects.all().delete()
        SnapshotPointer.objects.all().delete()
        assert run_state_fast("run-a").to_dict() == expected["run-a"]
        assert metric("snapshot_misses", "missing").total == 2


@pytest.mark.django_db
class TestWriting:
    def test_a_new_snapshot_never_overwrites_the_previous_one(self):
        lease = working_run("run-a", 30)
        first = snapshot_write(run_id="run-a", state=run_state(run_id="run-a"))
        more("run-a", lease.epoch, 30, 10)
        second = snapshot_write(run_id="run-a", state=run_state(run_id="run-a"))
        first.refresh_from_db()
        assert (first.seq, second.seq) == (30, 40)
        assert state_loads(first.body).last_seq == 30
        assert snapshot_current(run_id="run-a")[0].id == second.id

    def test_the_pointer_never_moves_back_to_an_older_seq(self):
        working_run("run-a", 40)
        newer = snapshot_write(run_id="run-a", state=run_state(run_id="run-a", at=40))
        snapshot_write(run_id="run-a", state=run_state(run_id="run-a", at=20))  # a slow writer, late
        assert snapshot_current(run_id="run-a")[0].id == newer.id

    def test_only_the_last_few_snapshots_are_kept(self):
        lease = working_run("run-a", 10)
        seq = 10
        for _ in range(6):
            seq = more("run-a", lease.epoch, seq, 2)
            snapshot_write(run_id="run-a", state=run_state(run_id="run-a"))
        assert list(Snapshot.objects.filter(run_id="run-a").order_by("seq").values_list("seq", flat=True)) == [18, 20, 22]
        assert metric("snapshot_write_ms").count == 6

    def test_a_state_of_another_run_is_refused(self):
        working_run("run-a", 5)
        with pytest.raises(ValueError, match="the state is of run 'run-a', not 'run-b'"):
            snapshot_write(run_id="run-b", state=run_state(run_id="run-a"))


@pytest.mark.django_db
class TestPolicy:
    def test_by_default_no_run_below_2000_events_is_snapshotted(self):
        lease = working_run("run-long", 1999)
        assert snapshot_maybe("run-long") is None
        more("run-long", lease.epoch, 1999, 1)
        snap = snapshot_maybe("run-long")
        assert snap is not None and snap.seq == 2000
        assert snapshot_maybe("run-long") is None  # not another until the interval (500) has passed
        more("run-long", lease.epoch, 2000, 500)
        assert snapshot_maybe("run-long").seq == 2500

    def test_a_run_can_have_its_own_interval_or_none(self):
        lease = working_run("run-voice", 30)
        snapshot_policy_set(run_id="run-voice", interval=10, min_events=20)
        assert snapshot_maybe("run-voice").seq == 30
        more("run-voice", lease.epoch, 30, 9)
        assert snapshot_maybe("run-voice") is None
        more("run-voice", lease.epoch, 39, 1)
        assert snapshot_maybe("run-voice").seq == 40
        assert run_state_fast("run-voice").to_dict() == run_state(run_id="run-voice").to_dict()
        snapshot_policy_set(run_id="run-voice", interval=None)
        more("run-voice", lease.epoch, 40, 50)
        assert snapshot_maybe("run-voice") is None

    @override_settings(RECKON_SNAPSHOT_INTERVAL=0)
    def test_an_interval_of_zero_in_settings_means_never(self):
        working_run("run-a", 2100)
        assert snapshot_maybe("run-a") is None

    def test_a_bad_policy_is_refused_with_a_reason(self):
        working_run("run-a", 3)
        with pytest.raises(ValueError, match="snapshot interval must be a whole number >= 1"):
            snapshot_policy_set(run_id="run-a", interval=0)
        with pytest.raises(ValueError, match="min_events must be a whole number >= 0"):
            snapshot_policy_set(run_id="run-a", interval=5, min_events=-1)

    def test_a_quarantined_fold_writes_no_snapshots(self):
        working_run("run-a", 30)
        snapshot_policy_set(run_id="run-a", interval=10, min_events=0)
        version_quarantine(fold_version=FOLD_VERSION, fold_code=FOLD_CODE, reason="equivalence failure")
        assert snapshot_maybe("run-a") is None
        assert not Snapshot.objects.exists()


def test_replay_metrics_names_every_series_the_seed_asks_for(db):
    working_run("run-a", 30)
    snapshot_write(run_id="run-a", state=run_state(run_id="run-a", at=20))
    run_state_fast("run-a")
    for name in ("events_replayed", "replay_duration_ms", "snapshot_load_ms", "snapshot_write_ms", "snapshot_seq_gap"):
        assert metric(name).count >= 1, name
    assert metric("snapshot_seq_gap").last == 10


# --- a crash between the body and the pointer -----------------------------------------------------

CHILD = """
import os, sys
from django.conf import settings
settings.DATABASES["default"]["NAME"] = sys.argv[1]   # the test database, not the configured one
import django
django.setup()
from runs.selectors import run_state
from runs.snapshots import snapshot_write
snapshot_write(run_id=sys.argv[2], state=run_state(run_id=sys.argv[2]))
print("published", flush=True)
"""


def child_env(**extra):
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="reckon.settings", PYTHONPATH=str(ROOT), **extra)
    return env


@pytest.mark.django_db(transaction=True)
def test_a_crash_between_writing_the_body_and_publishing_the_pointer_leaves_the_previous_snapshot_current():
    lease = working_run("run-crash", 40)
    previous = snapshot_write(run_id="run-crash", state=run_state(run_id="run-crash"))
    more("run-crash", lease.epoch, 40, 20)
    connection.close()  # SQLite: let the child take the write lock
    db_name = connection.settings_dict["NAME"]
    with subprocess.Popen(
        [sys.executable, "-c", CHILD, db_name, "run-crash"],
        cwd=ROOT,
        env=child_env(RECKON_FAULT_AT="snapshot_body_written"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as child:  # closes the pipes and waits for the child on the way out
        try:
            line = child.stdout.readline()
            assert line.strip() == "paused at snapshot_body_written", child.stderr.read() if not line else line
            # The body row is inserted (in the child's open transaction) and the pointer is not yet moved.
            os.kill(child.pid, signal.SIGKILL)
            assert child.wait(timeout=30) == -signal.SIGKILL
        finally:
            if child.poll() is None:
                child.kill()
    assert snapshot_current(run_id="run-crash")[0].id == previous.id
    assert list(Snapshot.objects.filter(run_id="run-crash").values_list("id", flat=True)) == [previous.id]
    fast = run_state_fast("run-crash")
    assert fast.to_dict() == run_state(run_id="run-crash").to_dict()
    assert metric("snapshot_seq_gap").last == 20  # loaded from the previous snapshot at 40, tail 41..60
    # And an uninterrupted writer publishes normally afterwards.
    done = subprocess.run([sys.executable, "-c", CHILD, db_name, "run-crash"], cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert snapshot_current(run_id="run-crash")[0].seq == 60
