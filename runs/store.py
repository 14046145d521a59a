"""The one append path (``events_append``), and the names callers import for the store.

``events_append`` writes a batch of events to one run, all or none, and only when the caller's
epoch is the run's current lease epoch and ``expected_seq`` is the run's last seq. Read top to
bottom it is: check the events and number them (runs.store_check), link the chain and check the
fence and write them in one executor per engine (runs.store_pg, runs.store_sqlite), apply the
read-model rules in the same transaction, commit; a refused fence is diagnosed here.

Why this is safe under concurrency: the fence is an UPDATE of the run row, which takes its lock. A
second writer from the same prefix blocks on that lock; when the first commits, PostgreSQL
re-evaluates the second's WHERE clause against the new row version (READ COMMITTED's
EvalPlanQual), finds ``last_seq`` (and the head) moved, updates nothing, and so inserts nothing. A
writer holding an old epoch never matches ``lease_epoch``. The unique (run, seq) constraint stays
as the last line of defence. On SQLite the same UPDATE runs inside an IMMEDIATE transaction, which
holds the database write lock from BEGIN.

A second ``run_finished`` is refused by the same fence (``finished_seq IS NULL``), so at most one
terminal outcome is ever durable. Functions registered with ``projector_register`` run inside the
append's transaction: a read model they maintain can never disagree with the committed log.
"""

from __future__ import annotations

import json
import logging
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable, Iterable, Iterator, Sequence

from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction

from runs import store_pg, store_sqlite
from runs.errors import InvalidEvent, RunFinished, RunNotFound, RunTooLarge, SeqConflict, StaleEpoch
from runs.events import CURRENT_SCHEMA_VERSION
from runs.fold import Event
from runs.store_check import AFTER_THE_END, events_check, plain_spec, room_for, run_too_large
from runs.store_read import events_load, events_read, events_replay, events_stream, payload_loads

__all__ = [
    "NewEvent", "Event", "StatementPart", "Rider", "projector_register", "after_append_register", "after_append_merged",
    "rereads_kept", "rereads_for", "events_append", "events_read", "events_load", "events_replay",
    "events_stream", "payload_loads", "plain_spec",
]

log = logging.getLogger("reckon.store")


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event to append; its seq is assigned by the store."""

    type: str
    payload: dict
    ts: datetime | None = None
    v: int = CURRENT_SCHEMA_VERSION


Projector = Callable[[str, list[Event], int], None]
_PROJECTORS: list[tuple[Projector, frozenset[str] | None]] = []


# Not frozen: a projector builds one or two per appended event on the agent's hot path, and a
# frozen dataclass's __init__ (object.__setattr__ per field) cost three times a plain one's.
@dataclass(slots=True)
class StatementPart:
    """A projector's work on one appended event, as SQL that rides in the append's own statement.

    ``condition`` (may be empty) is ANDed into the fence's WHERE clause, where ``reckon_run.run_id``
    names the run: when it is false the statement writes nothing and the append is done again the
    general way (a transaction, the projector called in Python), so a condition states when the
    one-statement form is exact, never whether the append is allowed. ``cte`` is one data-modifying
    statement that may read ``ev`` (the inserted event: ``run_id``, ``seq``, ``epoch``). Parameters
    are positional (``%b``): the set's, the condition's, then the cte's.
    """

    condition: str = ""
    condition_params: tuple = ()
    cte: str = ""
    cte_params: tuple = ()
    # An assignment added to the fence's SET clause (``column = expression``), evaluated on the run
    # row the fence moves: a read model kept on that row costs no row, index entry or lock of its
    # own (the uncertain-call projection's calls in flight). Its expressions see the row as it was.
    set: str = ""
    set_params: tuple = ()


# statement(run_id, event) -> StatementPart | None; None: this event needs the Python projector.
StatementForm = Callable[[str, Event], "StatementPart | None"]
_STATEMENT_FORMS: dict[Projector, StatementForm] = {}


@dataclass(frozen=True, slots=True)
class Rider:
    """A projector's work on one appended event, as SQL riding in the append's statement when the
    append is a transaction anyway (another projector of the event runs in Python).

    ``cte`` is one data-modifying statement, placed after the insert; it may read ``ev`` (the
    inserted events: ``run_id``, ``seq``, ``epoch``; empty when the fence refused, and then it must
    write nothing). Like every part of one statement it sees the tables as they were before the
    append, so it must not depend on what the other projectors write for these events, or must
    state exactly what they would have left. ``result`` is an SQL expression
    evaluated once the statement has run, where ``{cte}`` names the cte's rows; ``then(value)`` is
    called with its value in the projector's turn (after the projectors registered before it, inside
    the append's transaction), and may do the projector's work in Python after all when the value
    says the SQL could not. Parameters are positional (``%b``), in the order the texts are placed.
    """

    cte: str
    cte_params: tuple
    result: str
    result_params: tuple
    then: Callable[[object], None]


# rider(run_id, events) -> Rider | None; None: the Python projector does the work.
RiderForm = Callable[[str, list[Event]], "Rider | None"]
_RIDER_FORMS: dict[Projector, RiderForm] = {}


def projector_register(fn: Projector, *, types: Iterable[str] | None = None, statement: StatementForm | None = None, rider: RiderForm | None = None) -> Projector:
    """Run ``fn(run_id, events, epoch)`` inside the transaction of every append that carries one of
    ``types`` (every append when None), after the insert; ``epoch`` is the lease epoch the fence
    just accepted, the one that wrote ``events``.

    Naming the types matters for speed: an append that no projector reads is a single statement
    in autocommit, one round trip and one commit, instead of BEGIN, statement, COMMIT.

    ``statement`` (PostgreSQL, a single event that does not end the run): the same work as SQL
    folded into the append's one statement (``StatementPart``), so the agent's hot path (a tool
    call's start, then its completion) stays one round trip and one commit with its read models.
    It must do exactly what ``fn`` would do for that event, or return None to leave it to ``fn``.

    ``rider`` (PostgreSQL, an append that does not end the run and is a transaction anyway, because
    some projector of it has no statement form): ``fn``'s writes as SQL in the append's statement
    (``Rider``), so a projector that only writes costs no round trip of its own.
    """
    wanted = frozenset(types) if types is not None else None
    if all(f is not fn for f, _ in _PROJECTORS):
        _PROJECTORS.append((fn, wanted))
        _PROJECTORS_BY_TYPE.clear()
    if statement is not None:
        _STATEMENT_FORMS[fn] = statement
    if rider is not None:
        _RIDER_FORMS[fn] = rider
    return fn


AfterAppend = Callable[[str, int, int], None]
_AFTER_APPEND: list[AfterAppend] = []


def after_append_register(fn: AfterAppend) -> AfterAppend:
    """Call ``fn(run_id, first_seq, last_seq)`` after every append, once its transaction commits
    (at once in autocommit; never when it rolls back).

    For work that must not delay or endanger the append (enqueuing a snapshot, say): ``fn`` runs
    outside the append's transaction, an exception it raises is logged and swallowed, since the
    events are already durable and the caller must learn that they are. ``fn`` should be a few
    integer comparisons and, rarely, an enqueue: it runs on every append and may not query.
    """
    if all(f is not fn for f in _AFTER_APPEND):
        _AFTER_APPEND.append(fn)
    return fn


# Runs whose after-append hooks wait for the end of this thread's (or task's) ``after_append_merged``
# block: run id -> [first seq, last seq] of everything appended to it meanwhile. None outside one.
_merged: ContextVar[dict[str, list[int]] | None] = ContextVar("reckon_after_append_merged", default=None)


@contextmanager
def after_append_merged() -> Iterator[None]:
    """Call the after-append hooks once per run for everything appended in this block (the
    importer's chunks), at its end, instead of once per append: a file of 200 chunks enqueues one
    snapshot check, not 200. Inside a transaction the hooks still wait for its commit. The block
    is this thread's (a context variable): appends of other threads keep their own hooks."""
    merged: dict[str, list[int]] = {}
    token = _merged.set(merged)
    try:
        yield
    finally:
        _merged.reset(token)
    db = connections[DEFAULT_DB_ALIAS]
    for run_id, (first_seq, last_seq) in merged.items():
        _after_append(db, run_id, first_seq, last_seq)


# Rows of one run read back by seq while an import writes it (``rereads_kept``): run id, and seq ->
# (type, payload as orjson's text, ts, v). None outside such a block.
_rereads: ContextVar[tuple[str, dict[int, tuple]] | None] = ContextVar("reckon_rereads_kept", default=None)


@contextmanager
def rereads_kept(run_id: str) -> Iterator[None]:
    """In this block, a read model that reads ``run_id``'s stored events back by seq
    (``recovery.rows.events_at``: the start of each call still in flight, for every chunk an import
    writes) keeps the events it read and takes them from there the next time, reading only the
    others. For the importer, inside its one transaction and under the run's import lease: the log
    is append-only and no one else can write the run meanwhile, so an event read stays what it was
    until the block ends. Without it a run whose calls stay in flight is read back a growing number
    of times, each read a page of a table larger than the server's buffers."""
    token = _rereads.set((run_id, {}))
    try:
        yield
    finally:
        _rereads.reset(token)


def rereads_for(run_id: str) -> dict[int, tuple] | None:
    """The events kept for ``run_id`` by an enclosing ``rereads_kept`` block (seq -> type, payload
    text, ts, v), for its reader to use and fill; None outside such a block or for another run."""
    kept = _rereads.get()
    return kept[1] if kept is not None and kept[0] == run_id else None


def _after_append(db, run_id: str, first_seq: int, last_seq: int) -> None:
    merged = _merged.get()
    if merged is not None:
        span = merged.setdefault(run_id, [first_seq, last_seq])
        span[0], span[1] = min(span[0], first_seq), max(span[1], last_seq)
        return
    if not db.in_atomic_block:
        # Autocommit: the append is already durable. What on_commit would do, without its
        # bookkeeping on every append.
        for fn in _AFTER_APPEND:
            try:
                fn(run_id, first_seq, last_seq)
            except Exception:
                log.exception("after-append hook %s failed for run %s", getattr(fn, "__qualname__", fn), run_id)
        return
    for fn in _AFTER_APPEND:

        def after_append(fn=fn) -> None:
            fn(run_id, first_seq, last_seq)

        transaction.on_commit(after_append, robust=True, using=db.alias)


def _projectors_for(events: Sequence[NewEvent]) -> list[Projector]:
    if len(events) == 1:  # the commonest append: one lookup (registration clears the cache)
        found = _PROJECTORS_BY_TYPE.get(events[0].type)
        if found is None:
            found = _PROJECTORS_BY_TYPE[events[0].type] = _projectors_naming({events[0].type})
        return found
    return _projectors_naming({ev.type for ev in events})


def _projectors_naming(names: set[str]) -> list[Projector]:
    return [fn for fn, wanted in _PROJECTORS if wanted is None or not wanted.isdisjoint(names)]


_PROJECTORS_BY_TYPE: dict[str, list[Projector]] = {}


def events_append(*, run_id: str, epoch: int, expected_seq: int, events: Sequence[NewEvent], key_secret_fill: bool = True) -> list[Event]:
    """Append ``events`` to run ``run_id`` as seqs ``expected_seq + 1 ...``, all or none.

    A ``run_started`` of schema version 3 or later that carries no key secret gets a new random one
    (runs.identity), unless ``key_secret_fill`` is false: the importer keeps a log exactly as given.

    Raises StaleEpoch when ``epoch`` is not the run's current (unreleased) lease epoch, SeqConflict
    when ``expected_seq`` is not its last seq, RunFinished for a second terminal event, RunNotFound,
    EventTooLarge and RunTooLarge (RECKON_MAX_EVENT_BYTES, RECKON_MAX_RUN_BYTES) and InvalidEvent;
    in every case nothing is written. Returns the appended events as the fold sees them.
    """
    if not events:
        raise InvalidEvent("an append needs at least one event")
    if isinstance(expected_seq, bool) or not isinstance(expected_seq, int) or expected_seq < 0:
        raise InvalidEvent(f"expected_seq must be a whole number >= 0, got {expected_seq!r}")
    now = datetime.now(timezone.utc)
    # Check the events, number them, encode them and frame their canonical bytes.
    batch = events_check(run_id, expected_seq, events, key_secret_fill, now)
    projectors = _projectors_for(events)
    riders: dict[Projector, Rider] = {}

    def apply_rules(results: dict) -> None:
        # The read-model rules, in the append's transaction: the seals of sealed values, then each
        # projector (its rider's result when its SQL rode in the append's statement).
        if batch.seals:
            _seals_write(run_id, batch.seals)
        for project in projectors:
            if project in results:
                riders[project].then(results[project])
            else:
                project(run_id, batch.appended, epoch)

    # Check the fence, link the chain, write, apply the rules, commit: one executor per engine.
    db = connections[DEFAULT_DB_ALIAS]
    if db.vendor == "postgresql":
        parts = _statement_parts(projectors, run_id, batch)
        riders = _riders_for(projectors, run_id, batch) if parts is None else {}
        ok = store_pg.append(db, run_id, epoch, expected_seq, batch, projectors, parts, riders, apply_rules)
    else:
        ok = store_sqlite.append(run_id, epoch, expected_seq, batch, now, apply_rules)
    if not ok:
        raise _fence_refused(run_id, epoch, expected_seq, batch)
    if _AFTER_APPEND:
        _after_append(db, run_id, expected_seq + 1, batch.last_seq)
    return batch.appended


def _statement_parts(projectors, run_id: str, batch) -> list[StatementPart] | None:
    """Every projector's statement part for a single event that does not end the run and seals
    nothing, or None when there are no projectors or one of them has none."""
    if not projectors or len(batch.appended) != 1 or batch.finishing or batch.seals:
        return None
    parts = []
    for project in projectors:
        form = _STATEMENT_FORMS.get(project)
        part = form(run_id, batch.appended[0]) if form is not None else None
        if part is None:
            return None
        parts.append(part)
    return parts


def _riders_for(projectors, run_id: str, batch) -> dict[Projector, Rider]:
    """Each projector's rider for an append that does not end the run, where it has one."""
    if batch.finishing or not _RIDER_FORMS:
        return {}
    found = {}
    for project in projectors:
        form = _RIDER_FORMS.get(project)
        rider = form(run_id, batch.appended) if form is not None else None
        if rider is not None:
            found[project] = rider
    return found



def _seals_write(run_id: str, seals: list[tuple[int, dict]]) -> None:
    # An event with sealed values is rare (a call naming a sensitive field, a run's start): its
    # salts take one more statement, inside the append's transaction, and never touch the event row.
    with connection.cursor() as cur:
        cur.executemany("INSERT INTO reckon_event_seal (run_id, seq, salts) VALUES (%s, %s, %s)", [(run_id, seq, json.dumps(salts, sort_keys=True)) for seq, salts in seals])


def _fence_refused(run_id: str, epoch: int, expected_seq: int, batch) -> Exception:
    """What a refused fence means for ``batch`` (``_diagnose``), recorded (``_record_fenced``): the
    error an append that wrote nothing raises."""
    error = _diagnose(cur_run_id=run_id, epoch=epoch, expected_seq=expected_seq, finishing=batch.finishing, live=batch.live, sizes=[len(raw) for raw in batch.encoded])
    _record_fenced(run_id, epoch, error)
    return error


def _diagnose(*, cur_run_id: str, epoch: int, expected_seq: int, finishing: bool, live: bool = False, sizes: Sequence[int] = ()) -> Exception:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT lease_epoch, lease_holder, last_seq, finished_seq, payload_bytes FROM reckon_run WHERE run_id = %s",
            [cur_run_id],
        )
        row = cur.fetchone()
    if row is None:
        return RunNotFound(cur_run_id)
    current_epoch, holder, last_seq, finished_seq, stored_bytes = row
    if current_epoch != epoch or not holder:
        return StaleEpoch(run_id=cur_run_id, epoch=epoch, current_epoch=current_epoch, last_seq=last_seq, released=current_epoch == epoch)
    if last_seq != expected_seq:
        return SeqConflict(run_id=cur_run_id, expected_seq=expected_seq, last_seq=last_seq, current_epoch=current_epoch)
    if (finishing or live) and finished_seq is not None:
        refused = "a second run_finished is refused" if finishing else AFTER_THE_END
        return RunFinished(run_id=cur_run_id, finished_seq=finished_seq, current_epoch=current_epoch, last_seq=last_seq, refused=refused)
    if stored_bytes > room_for(sum(sizes)):
        return run_too_large(cur_run_id, expected_seq, stored_bytes, sizes)
    # The fence moved between the append and this look: report it as the conflict it was.
    return SeqConflict(run_id=cur_run_id, expected_seq=expected_seq, last_seq=last_seq, current_epoch=current_epoch)


def _record_fenced(run_id: str, epoch: int, error: Exception) -> None:
    if isinstance(error, RunTooLarge):  # the run is full, not fenced: no lease record
        log.warning("append refused: run too large", extra={"run_id": run_id, "epoch": epoch, "reason": str(error)})
        return
    if isinstance(error, RunNotFound):
        return
    from runs.leases import lease_record

    lease_record(run_id=run_id, kind="fenced", epoch=epoch, detail=str(error))
    log.warning("append fenced", extra={"run_id": run_id, "epoch": epoch, "reason": str(error)})


