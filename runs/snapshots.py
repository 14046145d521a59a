"""Snapshots: a cache of a partial fold, justified by measured replay cost, never a source of truth.

A snapshot is the ``RunState`` after seq S, serialised to JSON (``runs.snapshot_format``), stored
with the fold version that produced it, S itself and the sha256 of the body. ``run_state_fast``
loads the current snapshot, checks it, and folds only the events after S; every check that fails (a
dangling pointer, an unknown or quarantined version, a wrong digest, a body that does not decode, a
tail that does not begin at S + 1) is a cache miss: it is counted and the state is folded from event
1 exactly as ``runs.selectors.run_state`` does. The log stays authoritative, so deleting every
snapshot costs time, never a run (docs/schema-versions.md, "Snapshots", states these rules).

Reading never writes. A miss found by a read is handed to the miss handlers registered with
``snapshot_miss_register`` (``runs.tasks`` enqueues ``snapshot_repair_task``), and
``snapshot_repair`` re-checks that snapshot later, in a worker, and discards or quarantines it. So a
``GET`` of a run's state, a console screen or an agent's resumption writes no row, whatever it finds.

Writing: the body row is inserted and the pointer that makes it current is updated in the same
transaction, body first. Nothing is visible until the commit makes both durable together; a crash
before the commit leaves the previous snapshot, untouched, as the current one. A snapshot never
overwrites another: each is a new row, and only the oldest beyond ``KEEP_SNAPSHOTS`` are pruned.

Versioning: see ``runs.snapshot_format`` (``FOLD_VERSION`` by hand, ``FOLD_CODE`` by digest). A
version found to disagree with a full replay (``verify_snapshots``, or a repair) is quarantined:
none of its snapshots is loaded or written again.

The measurements (docs/schema-versions.md, "Measurements") live in process memory
(``runs.measurements``), never in the database.
"""

from __future__ import annotations

import hashlib
import json
import logging
import tempfile
import time
from dataclasses import dataclass
from typing import IO, Callable, Iterable, Iterator

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models.functions import Now

from runs.errors import RunNotFound
from runs.events import UnknownEventType
from runs.faults import fault_point
from runs.fold import Event, RunState, apply, fold
from runs.measurements import metrics_record
from runs.models import Run, Snapshot, SnapshotPointer, SnapshotPolicy, SnapshotQuarantine
from runs.snapshot_format import FOLD_CODE, FOLD_VERSION, body_digest, state_dumps, state_loads, state_to_jsonable
from runs.pg import copy_text, server_cursor
from runs.store import events_load, events_replay
from runs.upcasters import UnsupportedVersion

log = logging.getLogger("reckon.snapshots")

# How many snapshots of a run are kept: the current one and a few before it, to diagnose an
# equivalence failure. Correctness never needs any of them.
KEEP_SNAPSHOTS = 3


class SnapshotError(ValueError):
    """A snapshot request that cannot be honoured as given (a bad policy value, a state of another run)."""


def _ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000.0


# --- writing -------------------------------------------------------------------------------------


def snapshot_write(*, run_id: str, state: RunState) -> Snapshot:
    """Store ``state`` as a new snapshot of ``run_id`` and make it current, or leave nothing.

    The body goes in first and the pointer moves after it, in one transaction: no reader can see a
    pointer to a body that is not there, and a crash at any point leaves the previous snapshot
    current. A pointer never moves backwards: if another writer already published a later seq, this
    body stays as an older, non-current snapshot.
    """
    if state.run_id != run_id:
        raise SnapshotError(f"the state is of run {state.run_id!r}, not {run_id!r}")
    if state.last_seq < 1:
        raise SnapshotError(f"run {run_id!r}: an empty state is not worth a snapshot")
    t0 = time.perf_counter()
    return _body_write(run_id, state.last_seq, state_dumps(state), t0)


def _body_write(run_id: str, seq: int, body: str, t0: float, digest: str | None = None) -> Snapshot:
    digest = digest or _digest(body)
    with transaction.atomic():
        snap = Snapshot.objects.create(run_id=run_id, seq=seq, fold_version=FOLD_VERSION, fold_code=FOLD_CODE, body=body, digest=digest)
        _publish(run_id, snap)
    metrics_record([("snapshot_write_ms", "", _ms(t0))])
    return snap


def _publish(run_id: str, snap: Snapshot) -> None:
    # Inside the transaction that inserted the body: the pointer moves after it, or neither is seen.
    fault_point("snapshot_body_written")
    _pointer_publish(run_id, snap)
    _prune(run_id)


def _digest(body: str) -> str:
    """``body_digest``, without a second copy of a long body: its UTF-8 bytes are hashed a slice at a time."""
    if len(body) <= _SLICE:
        return body_digest(body)
    h = hashlib.sha256()
    for i in range(0, len(body), _SLICE):
        h.update(body[i : i + _SLICE].encode("utf-8"))
    return h.hexdigest()


_SLICE = 1 << 20
# The body's JSON, as ``state_dumps`` writes it (the same options, so the same text piece by piece).
_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode
_DRAINED = ("trajectory", "completed_calls")


class _Drained:
    """A fold's ``trajectory`` and ``completed_calls`` kept as body text in temporary files instead
    of objects in memory.

    Both only grow (no fold rule reads them), and for a long run they are nearly all of the state: a
    1,000,000-event run's state is some 200 MB of objects, its body 66 MB of text. ``take`` writes
    what the state holds as the body's JSON, one line a take (JSON text holds no raw newline), and
    empties the two fields, so the fold goes on with the rest. A completed call's key that comes
    again later keeps its first place and takes its last value (a dictionary's rule); such keys are
    found by the hashes of the keys taken so far and settled when the body is assembled."""

    def __init__(self) -> None:
        self.trajectory = tempfile.TemporaryFile()
        self.calls = tempfile.TemporaryFile()
        self.seen: set[int] = set()
        self.again: set = set()  # keys taken more than once (or whose hash met another key's)

    def close(self) -> None:
        self.trajectory.close()
        self.calls.close()

    def take(self, st: RunState) -> None:
        if st.trajectory:
            self.trajectory.write(_encode(st.trajectory)[1:-1].encode() + b"\n")
            st.trajectory.clear()
        calls = st.completed_calls
        if calls:
            seen = self.seen
            for key in calls:
                h = hash(key)
                if h in seen:
                    self.again.add(key)
                else:
                    seen.add(h)
            self.calls.write(_encode([[k, v] for k, v in calls.items()])[1:-1].encode() + b"\n")
            calls.clear()

    def _pieces(self, f) -> Iterator[bytes]:
        f.seek(0)
        for line in f:
            yield line[:-1]

    def _calls_merged(self) -> None:
        # One key in several takes: its first place, its last value, as the dictionary would hold it.
        last: dict = {}
        for piece in self._pieces(self.calls):
            for k, v in json.loads(b"[" + piece + b"]"):
                if k in self.again:
                    last[k] = v
        done: set = set()
        merged = tempfile.TemporaryFile()
        for piece in self._pieces(self.calls):
            pairs = []
            for k, v in json.loads(b"[" + piece + b"]"):
                if k in last:
                    if k in done:
                        continue
                    done.add(k)
                    v = last[k]
                pairs.append([k, v])
            if pairs:
                merged.write(_encode(pairs)[1:-1].encode() + b"\n")
        self.calls.close()
        self.calls = merged

    def body(self, st: RunState) -> tuple[IO[bytes], int, str]:
        """The body of ``st`` with the drained fields put back (``state_dumps`` of the whole state),
        as UTF-8 in a new temporary file positioned at its start, with its
        length and sha256. Written a take at a time: the body is never one string in memory."""
        self.take(st)
        self.seen = set()
        if self.again:
            self._calls_merged()
        out = tempfile.TemporaryFile()
        h = hashlib.sha256()

        def put(data: bytes) -> None:
            h.update(data)
            out.write(data)

        put(b"{")
        for i, (name, value) in enumerate(state_to_jsonable(st).items()):
            put((("," if i else "") + _encode(name) + ":").encode())
            if name in _DRAINED:
                f = self.trajectory if name == "trajectory" else self.calls
                put(b"[")
                first = True
                for piece in self._pieces(f):
                    if piece:
                        put(piece if first else b"," + piece)
                        first = False
                put(b"]")
            else:
                put(_encode(value).encode())
        put(b"}")
        size = out.tell()
        out.seek(0)
        return out, size, h.hexdigest()


class SnapshotFold:
    """A run's fold from event 1 that ends in its snapshot, fed the run's events as they are read or
    written, with the state's two growing fields kept as body text (``_Drained``): what a long run's
    first snapshot holds is then the state less those fields, never the whole state as objects
    beside its body. The events must be the log's as a replay reads them (``events_replay``: upcast,
    decoded from the stored payloads, as Events or plain tuples in Event's field order). ``write`` stores the snapshot (inside the caller's transaction, if any);
    ``close`` drops the temporary files of a fold that is not written."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.st = RunState()
        self.drained = _Drained()
        self.every = settings.RECKON_READ_CHUNK
        self.t0 = time.perf_counter()

    def feed(self, events: Iterable[Event]) -> None:
        st, drained, every = self.st, self.drained, self.every
        for ev in events:
            apply(st, ev)
            if not ev[0] % every:  # its seq
                drained.take(st)

    def close(self) -> None:
        self.drained.close()

    def write(self) -> Snapshot:
        st, run_id = self.st, self.run_id
        try:
            self.body_checked()
            metrics_record([("full_replays", "none", 1), ("events_replayed", "", st.last_seq), ("replay_duration_ms", "", _ms(self.t0))])
            t0 = time.perf_counter()  # the write's time, as snapshot_write's: the body's and the row's
            body, size, digest = self.drained.body(st)
        finally:
            self.close()
        with body:
            return _body_insert(run_id, st.last_seq, body, size, digest, t0)

    def body_checked(self) -> None:
        """SnapshotError unless the state folded is one worth a snapshot of this run."""
        st, run_id = self.st, self.run_id
        if st.run_id != run_id:
            raise SnapshotError(f"the log of run {run_id!r} folds to a state of run {st.run_id!r}")
        if st.last_seq < 1:
            raise SnapshotError(f"run {run_id!r}: an empty state is not worth a snapshot")


def _body_insert(run_id: str, seq: int, body: IO[bytes], size: int, digest: str, t0: float) -> Snapshot:
    """Store the body in ``body`` (a file at its start, ``size`` bytes of UTF-8 hashing to
    ``digest``) as the snapshot of ``run_id`` at ``seq`` and make it current, a slice at a time."""
    if connection.vendor not in ("postgresql", "sqlite"):
        return _body_write(run_id, seq, body.read().decode("utf-8"), t0, digest)
    with transaction.atomic():
        if connection.vendor == "postgresql":
            snap_id = _pg_body_copy(run_id, seq, body, digest)
        else:
            snap_id = _sqlite_body_insert(run_id, seq, body, size, digest)
        snap = Snapshot.objects.defer("body").get(id=snap_id)
        _publish(run_id, snap)
    metrics_record([("snapshot_write_ms", "", _ms(t0))])
    return snap


def _sqlite_body_insert(run_id: str, seq: int, body: IO[bytes], size: int, digest: str) -> int:
    # SQLite: the row is inserted with a text of the body's length that SQLite makes itself, and
    # the body written into it a slice at a time through the blob handle; the body is never a
    # Python string, nor a bound parameter SQLite would copy. The new row's id.
    with connection.cursor() as cur:
        cur.execute(_SQLITE_INSERT, [run_id, seq, FOLD_VERSION, FOLD_CODE, size, digest])
        snap_id = cur.fetchone()[0]
    with connection.connection.blobopen("reckon_snapshot", "body", snap_id) as blob:
        while piece := body.read(_SLICE):
            blob.write(piece)
    return snap_id


def snapshot_fold_write(*, run_id: str, upto: int) -> Snapshot:
    """Fold the run's log up to ``upto`` from event 1, a read chunk at a time (``SnapshotFold``), and
    store the state as its snapshot: the first snapshot of a long run, which would otherwise hold its
    whole state as objects and its body beside it (a 1,000,000-event run: 500 MB). Writes what
    ``snapshot_write`` of the full replay would, byte for byte, and counts the replay as
    ``run_state_fast`` counts one."""
    folding = SnapshotFold(run_id)
    # What a replay reads (``run_state``'s full replay reads the same): no timestamp a fold rule
    # does not read, and no Event built per row.
    events = events_replay(run_id=run_id, upto=upto)
    try:
        folding.feed(events)
    except BaseException:
        events.close()  # the read stops here (on PostgreSQL it holds the connection until then)
        folding.close()
        raise
    return folding.write()


def _pg_body_copy(run_id: str, seq: int, body: IO[bytes], digest: str) -> int:
    # PostgreSQL: the row goes in with COPY, its body sent a slice at a time (COPY's text escapes
    # apply byte by byte, so slice by slice), never one string nor one parameter. The new row's id.
    with server_cursor() as cur:
        with cur.copy(_PG_SNAPSHOT_COPY) as copy:
            copy.write(b"%b\t%d\t%d\t%b\t" % (copy_text(run_id.encode()), seq, FOLD_VERSION, FOLD_CODE.encode()))
            while piece := body.read(_SLICE):
                copy.write(copy_text(piece))
            copy.write(b"\t%b\t\n" % digest.encode())
        cur.execute(_PG_SNAPSHOT_COPIED, [run_id, seq, digest])
        return cur.fetchone()[0]


_PG_SNAPSHOT_COPY = "COPY reckon_snapshot (run_id, seq, fold_version, fold_code, body, digest, discard_reason) FROM STDIN"
_PG_SNAPSHOT_COPIED = "SELECT id FROM reckon_snapshot WHERE run_id = %s AND seq = %s AND digest = %s ORDER BY id DESC LIMIT 1"
_SQLITE_INSERT = "INSERT INTO reckon_snapshot (run_id, seq, fold_version, fold_code, body, digest, discard_reason) VALUES (%s, %s, %s, %s, CAST(zeroblob(%s) AS TEXT), %s, '') RETURNING id"


def _pointer_publish(run_id: str, snap: Snapshot) -> None:
    # The row lock (FOR UPDATE on PostgreSQL; SQLite's write transaction holds the whole database)
    # orders concurrent publishers of one run, so the later seq always wins.
    current = SnapshotPointer.objects.select_for_update().filter(run_id=run_id).values_list("snapshot_id", flat=True).first()
    if current is None:
        try:
            with transaction.atomic():
                SnapshotPointer.objects.create(run_id=run_id, snapshot_id=snap.id)
            return
        except IntegrityError:  # a concurrent first publisher; take the update path
            current = SnapshotPointer.objects.select_for_update().filter(run_id=run_id).values_list("snapshot_id", flat=True).get()
    current_seq = Snapshot.objects.filter(id=current, discarded_at__isnull=True).values_list("seq", flat=True).first()
    if current_seq is not None and current_seq > snap.seq:
        return
    SnapshotPointer.objects.filter(run_id=run_id).update(snapshot_id=snap.id, published_at=Now())


def _prune(run_id: str) -> None:
    keep = list(Snapshot.objects.filter(run_id=run_id).order_by("-id").values_list("id", flat=True)[:KEEP_SNAPSHOTS])
    current = SnapshotPointer.objects.filter(run_id=run_id).values_list("snapshot_id", flat=True).first()
    if current is not None:
        keep.append(current)
    Snapshot.objects.filter(run_id=run_id).exclude(id__in=keep).delete()


# --- reading -------------------------------------------------------------------------------------


def snapshot_pointed(run_id: str) -> int | None:
    """The id the run's current pointer names, or None when the run has no pointer."""
    return SnapshotPointer.objects.filter(run_id=run_id).values_list("snapshot_id", flat=True).first()


def snapshot_current(*, run_id: str) -> tuple[Snapshot | None, bool]:
    """The run's current snapshot and whether a pointer exists (a pointer without a row: deleted)."""
    pointed = snapshot_pointed(run_id)
    if pointed is None:
        return None, False
    return Snapshot.objects.filter(id=pointed, run_id=run_id).first(), True


def version_quarantined(*, fold_version: int, fold_code: str) -> bool:
    return SnapshotQuarantine.objects.filter(fold_version=fold_version, fold_code=fold_code).exists()


def version_quarantine(*, fold_version: int, fold_code: str, reason: str) -> None:
    """No snapshot of this version is loaded or written again (until the fold itself changes)."""
    try:
        with transaction.atomic():
            SnapshotQuarantine.objects.create(fold_version=fold_version, fold_code=fold_code, reason=reason[:5000])
    except IntegrityError:
        pass  # already quarantined; the first reason stays


def snapshot_discard(*, snapshot_id: int, reason: str) -> None:
    """Mark a snapshot unusable and unpublish it if it is current. The row stays for diagnosis."""
    with transaction.atomic():
        Snapshot.objects.filter(id=snapshot_id, discarded_at__isnull=True).update(discarded_at=Now(), discard_reason=reason[:300])
        SnapshotPointer.objects.filter(snapshot_id=snapshot_id).delete()


@dataclass
class Restored:
    """The outcome of folding a run from its snapshot: a state, or why the snapshot was a miss."""

    state: RunState | None
    miss: str | None = None  # missing, discarded, unknown_version, quarantined, digest, corrupt, gap, tail_fold
    detail: str = ""
    tail: int = 0
    load_ms: float = 0.0


def snapshot_restore(run_id: str, snap: Snapshot | None, pointer_exists: bool, upto: int | None) -> Restored:
    """``snap`` checked, decoded and the log after it (to ``upto``) folded on top; or, in ``miss``,
    why it cannot be used (a cache miss: the caller folds from event 1)."""
    t0 = time.perf_counter()
    if snap is None:
        return Restored(None, "missing", "the current pointer names a snapshot that no longer exists") if pointer_exists else Restored(None)
    if snap.discarded_at is not None:
        return Restored(None, "discarded", snap.discard_reason)
    if snap.fold_version != FOLD_VERSION or snap.fold_code != FOLD_CODE:
        return Restored(None, "unknown_version", f"written by fold {snap.fold_version}/{snap.fold_code}, this is {FOLD_VERSION}/{FOLD_CODE}")
    if version_quarantined(fold_version=snap.fold_version, fold_code=snap.fold_code):
        return Restored(None, "quarantined", f"fold {snap.fold_version}/{snap.fold_code} is quarantined")
    if body_digest(snap.body) != snap.digest:
        return Restored(None, "digest", f"the body's sha256 is not the recorded {snap.digest}")
    try:
        st = state_loads(snap.body)
    except ValueError as exc:
        return Restored(None, "corrupt", str(exc))
    if st.run_id != run_id:
        return Restored(None, "corrupt", f"the body is a state of run {st.run_id!r}")
    if st.last_seq != snap.seq:
        return Restored(None, "gap", f"the body ends at seq {st.last_seq}, the snapshot claims seq {snap.seq}")
    load_ms = _ms(t0)
    tail = events_load(run_id=run_id, after=snap.seq, upto=upto)
    if tail and tail[0].seq != snap.seq + 1:
        return Restored(None, "gap", f"the tail begins at seq {tail[0].seq}, not {snap.seq + 1}")
    if not tail:
        # Nothing after the snapshot: the log must still reach it (a log restored from an older
        # backup would end before the snapshot, and the snapshot would then invent events).
        head = Run.objects.filter(run_id=run_id).values_list("last_seq", flat=True).first() or 0
        if head < snap.seq:
            return Restored(None, "gap", f"the log ends at seq {head}, before the snapshot's seq {snap.seq}")
    try:
        for ev in tail:
            apply(st, ev)
    except (UnsupportedVersion, UnknownEventType):
        raise  # a fact about the log, not the cache: the full replay would refuse it the same way
    except Exception as exc:  # noqa: BLE001 - any failure on the cached path is settled by a full replay
        return Restored(None, "tail_fold", f"{type(exc).__name__}: {exc}")
    return Restored(st, None, tail=len(tail), load_ms=load_ms)


# Called with (run_id, snapshot_id, reason) for every miss a read finds; runs.apps registers the
# one that enqueues snapshot_repair_task. A read never settles a miss itself: that would write.
_MISS_HANDLERS: list[Callable[[str, int, str], None]] = []


def snapshot_miss_register(handler: Callable[[str, int, str], None]) -> None:
    if handler not in _MISS_HANDLERS:
        _MISS_HANDLERS.append(handler)


def _miss_report(run_id: str, snapshot_id: int, reason: str) -> None:
    for handler in _MISS_HANDLERS:
        try:
            handler(run_id, snapshot_id, reason)
        except Exception:  # a broker outage (or an eager task failing) costs a repair, never the read
            log.exception("could not hand snapshot %s of run %s (%s) over for repair", snapshot_id, run_id, reason)


def run_state_fast(run_id: str, at: int | None = None) -> RunState:
    """The run's state after event ``at`` (default: the last): the current snapshot plus the tail.

    Falls back to folding the whole log when there is no usable snapshot. Reads only: a snapshot
    that fails a check is counted as a miss and reported to the miss handlers (a repair task), after
    the state is computed, so the state never depends on the repair. Gives exactly what
    ``runs.selectors.run_state`` gives.
    """
    t0 = time.perf_counter()
    head = Run.objects.filter(run_id=run_id).values_list("last_seq", flat=True).first()
    if head is None:
        raise RunNotFound(run_id)
    pointed = snapshot_pointed(run_id)
    snap = Snapshot.objects.filter(id=pointed, run_id=run_id).first() if pointed is not None else None
    restored, why = Restored(None), "none"
    if snap is not None and at is not None and snap.seq > at:
        why = "before_snapshot"  # the snapshot is later than the state asked for: not a miss
    else:
        restored = snapshot_restore(run_id, snap, pointed is not None, at)
    observations: list[tuple[str, str, float]] = []
    if restored.state is not None:
        st = restored.state
        observations += [("snapshot_load_ms", "", restored.load_ms), ("snapshot_seq_gap", "", restored.tail)]
        replayed = restored.tail
    else:
        st = fold(events_replay(run_id=run_id, upto=at))
        replayed = st.last_seq
        observations.append(("full_replays", "miss" if restored.miss else why, 1))
    if restored.miss:
        observations.append(("snapshot_misses", restored.miss, 1))
    observations += [("events_replayed", "", replayed), ("replay_duration_ms", "", _ms(t0))]
    metrics_record(observations)
    if restored.miss:
        _miss_report(run_id, pointed, restored.miss)
    return st


# --- policy ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Policy:
    interval: int | None  # events between snapshots; None: never
    min_events: int  # no snapshot while the run is shorter than this


def snapshot_policy_get(*, run_id: str) -> Policy:
    row = SnapshotPolicy.objects.filter(run_id=run_id).values("interval", "min_events").first()
    if row is not None:
        return Policy(row["interval"], row["min_events"])
    return Policy(settings.RECKON_SNAPSHOT_INTERVAL or None, settings.RECKON_SNAPSHOT_MIN_EVENTS)


def snapshot_policy_set(*, run_id: str, interval: int | None, min_events: int | None = None) -> Policy:
    """Give one run its own interval: a voice run may snapshot often, a short one never."""
    if interval is not None and (isinstance(interval, bool) or not isinstance(interval, int) or interval < 1):
        raise SnapshotError(f"snapshot interval must be a whole number >= 1 or None (never), got {interval!r}")
    if min_events is None:
        min_events = settings.RECKON_SNAPSHOT_MIN_EVENTS
    if isinstance(min_events, bool) or not isinstance(min_events, int) or min_events < 0:
        raise SnapshotError(f"min_events must be a whole number >= 0, got {min_events!r}")
    if not Run.objects.filter(run_id=run_id).exists():
        raise RunNotFound(run_id)
    SnapshotPolicy.objects.update_or_create(run_id=run_id, defaults={"interval": interval, "min_events": min_events})
    return Policy(interval, min_events)


def snapshot_maybe(run_id: str) -> Snapshot | None:
    """Write a snapshot when the run's policy says one is due, else None.

    Due means: the policy has an interval, the run has at least ``min_events`` events, and at least
    ``interval`` events were appended since the current usable snapshot. A quarantined fold version
    writes nothing: its snapshots would not be loaded anyway.
    """
    policy = snapshot_policy_get(run_id=run_id)
    head = Run.objects.filter(run_id=run_id).values_list("last_seq", flat=True).first()
    if head is None:
        raise RunNotFound(run_id)
    if not policy.interval or head < policy.min_events:
        return None
    # The current snapshot's seq and version, not its body: a long run's body is tens of megabytes.
    pointed = snapshot_pointed(run_id)
    snap = Snapshot.objects.filter(id=pointed, run_id=run_id).defer("body").first() if pointed is not None else None
    since = snap.seq if snap is not None and snap.discarded_at is None and snap.fold_version == FOLD_VERSION and snap.fold_code == FOLD_CODE else 0
    if head - since < policy.interval:
        return None
    if version_quarantined(fold_version=FOLD_VERSION, fold_code=FOLD_CODE):
        return None
    if not since:
        # No usable snapshot: the whole log is folded, as run_state_fast would, without the whole
        # state as objects beside its body (an imported or long run's first snapshot).
        return snapshot_fold_write(run_id=run_id, upto=head)
    return snapshot_write(run_id=run_id, state=run_state_fast(run_id))
