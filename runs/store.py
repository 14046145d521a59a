"""The one append path, and the raw read path the fold is fed from.

``events_append`` writes a batch of events to one run, all or none, and only when the caller's
epoch is the run's current lease epoch and ``expected_seq`` is the run's last seq. The check and the
insert are one statement on PostgreSQL::

    WITH fence AS (UPDATE reckon_run SET last_seq = new WHERE run_id = r AND lease_epoch = e
                   AND last_seq = expected ... RETURNING run_id)
    INSERT INTO reckon_event ... SELECT ... FROM fence, unnest(...)

Why this is safe under concurrency: the UPDATE takes the run row's lock. A second writer from the
same prefix blocks on that lock; when the first commits, PostgreSQL re-evaluates the second's WHERE
clause against the new row version (READ COMMITTED's EvalPlanQual), finds ``last_seq`` moved, updates
nothing, and so inserts nothing. A writer holding an old epoch never matches ``lease_epoch``. The
unique (run, seq) constraint stays as the last line of defence: if anything ever bypassed the fence,
the insert would fail rather than fork the history. On SQLite the same UPDATE runs inside an
IMMEDIATE transaction, which holds the database write lock from BEGIN, so the UPDATE and the inserts
cannot interleave with another writer.

A second ``run_finished`` is refused by the same fence (``finished_seq IS NULL``), so at most one
terminal outcome is ever durable. Functions registered with ``projector_register`` run inside the
append's transaction: a read model they maintain can never disagree with the committed log.
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import re
import struct
import threading
from asyncio import _get_running_loop
from collections import OrderedDict
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable, Iterable, Iterator, Sequence

import orjson
import psycopg
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction
from psycopg.adapt import Loader
from psycopg.copy import LibpqWriter
from psycopg.errors import error_from_result as _error_from_result
from psycopg.generators import execute as _pg_execute
from psycopg.pq import DiagnosticField, ExecStatus, Format, TransactionStatus
from psycopg.rows import tuple_row

from runs.canonical import canon_list, chain_links, chain_links_framed, event_canon, event_canons, sealing_now, ts_texts
from runs.errors import EventTooLarge, InvalidEvent, RunFinished, RunNotFound, RunTooLarge, SeqConflict, StaleEpoch
from runs.events import (
    COMPLETION_SOURCES,
    CURRENT_SCHEMA_VERSION,
    INTRODUCED_IN,
    KEY_SECRET_SINCE,
    PLAIN_CHECKS,
    REQUIRED_FIELDS,
    TERMINAL,
    EventType,
    UnknownEventType,
    event_type,
    missing_fields,
    version_problem,
)
from runs.fold import TIMESTAMPED, Event, gc_paused
from runs.identity import KEY_SECRET_FIELD, key_secret_new
from runs.verify import genesis as chain_genesis
from runs.pg import ARRAY_DUMPERS, HASH_ITEM_PREFIX, binary_arrays, bytea_array, hashes_array, server_cursor
from runs.upcasters import UPCASTERS, call_tenant_problem, event_upcast, events_upcast, payload_complete

log = logging.getLogger("reckon.store")

_TERMINAL_NAMES = frozenset(t.value for t in TERMINAL)


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


# Runs whose after-append hooks wait for the end of an ``after_append_merged`` block: run id ->
# [first seq, last seq] of everything appended to it meanwhile. None outside such a block.
_merged: dict[str, list[int]] | None = None


@contextmanager
def after_append_merged() -> Iterator[None]:
    """Call the after-append hooks once per run for everything appended in this block (the
    importer's chunks), at its end, instead of once per append: a file of 200 chunks enqueues one
    snapshot check, not 200. Inside a transaction the hooks still wait for its commit."""
    global _merged
    outer, _merged = _merged, {}
    try:
        yield
        merged = _merged
    finally:
        _merged = outer
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
    if _merged is not None:
        span = _merged.setdefault(run_id, [first_seq, last_seq])
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


_THREAD_LOCAL = threading.local


def _default_db():
    """``connections[DEFAULT_DB_ALIAS]``, read straight from the handler's per-thread storage in
    synchronous code: the handler's own lookup goes through asgiref's ``Local``, whose failed
    attribute lookup formats an AttributeError and asks asyncio for a running loop (which raises
    too), about 2.5 us on every append. Anything but that plain case (a running event loop, no
    connection made in this thread yet, another asgiref or Django whose ``Local`` is built
    differently) takes the handler's lookup itself."""
    if _get_running_loop() is None:
        storage = vars(connections._connections).get("_storage")
        if type(storage) is _THREAD_LOCAL:
            db = vars(storage).get(DEFAULT_DB_ALIAS)
            if db is not None:
                return db
    return connections[DEFAULT_DB_ALIAS]


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


# For the common case: a registered type that needs no check beyond its required fields and the
# range of versions it may be written with. Anything else takes the full check in ``_check_slow``.
# ``_COMPLETED_TYPES``: the types whose current-version payload ``payload_complete`` may fill in.
_PLAIN = PLAIN_CHECKS
_COMPLETED_TYPES = frozenset(t for t, _ in UPCASTERS)
_STARTED = EventType.TOOL_CALL_STARTED.value
_COMPLETED = EventType.TOOL_CALL_COMPLETED.value
# A completion's only rule beyond its fields and versions is its source (``version_problem``): one
# whose source is absent or one of the known ones is plain too. A third of a working agent's events
# are completions; the full check costs each of them about a microsecond, in the importer and here.
_COMPLETED_PLAIN = (frozenset(REQUIRED_FIELDS[EventType.TOOL_CALL_COMPLETED]), INTRODUCED_IN.get(EventType.TOOL_CALL_COMPLETED, 1))


def plain_spec(type_, payload) -> tuple[frozenset[str], int] | None:
    """(required payload keys, first version) when the event's only checks left are those two
    (``PLAIN_CHECKS``, or a completion with a known source), else None: the full check decides."""
    spec = _PLAIN.get(type_) if type(type_) is str else None
    if spec is None and type_ == _COMPLETED and type(payload) is dict and payload.get("source", "live") in COMPLETION_SOURCES:
        return _COMPLETED_PLAIN
    return spec


def _check_slow(i: int, seq: int, run_id: str, ev: NewEvent) -> None:
    """Refuse an event the log must not hold, naming it by position and seq (returns for a valid one)."""
    try:
        t = event_type(ev.type)
    except UnknownEventType as exc:
        raise InvalidEvent(f"event {i} (seq {seq}): {exc}") from None
    if not isinstance(ev.payload, dict):
        raise InvalidEvent(f"event {i} (seq {seq}, {ev.type}): payload must be a JSON object")
    missing = missing_fields(t, ev.payload)
    if missing:
        raise InvalidEvent(f"event {i} (seq {seq}, {ev.type}): payload lacks {', '.join(missing)}")
    problem = version_problem(t, ev.v, ev.payload)
    if problem:
        raise InvalidEvent(f"event {i} (seq {seq}, {ev.type}): {problem}")
    if (t is EventType.RUN_STARTED) != (seq == 1):
        raise InvalidEvent(f"event {i} (seq {seq}): a run begins with run_started at seq 1, and only there")
    if t is EventType.RUN_STARTED and ev.payload["run_id"] != run_id:
        raise InvalidEvent(f"event {i} (seq 1): run_started names run {ev.payload['run_id']!r}, not {run_id!r}")


def _has_nul(value) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(_has_nul(v) for v in value)
    return False


_DUMPS_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_SORT_KEYS
# Without OPT_NON_STR_KEYS orjson takes a faster path; a payload with non-string keys is encoded
# again with it (its keys become strings, as before).
# Payloads are stored with their keys sorted: that text is, for almost every payload, exactly the
# payload's RFC 8785 bytes (runs.canonical), so the chain hashes the very text the store
# writes anyway, one encoding per event instead of two. A reader decodes the same object either way.
_FAST_OPTIONS = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_SORT_KEYS
_orjson_dumps = orjson.dumps


def _dumps_full(i: int, payload: dict) -> bytes:
    """A payload orjson's fast path (``_FAST_OPTIONS``, tried first by ``events_append``) refused,
    as UTF-8 bytes with non-string keys allowed; or refused as JSON the store cannot hold.

    The caller must still pass the bytes through ``_suspects_check`` (at once, or for a whole
    batch by ``_batch_check``): orjson writes NaN and Infinity as null, and a NUL as \\u0000.
    """
    try:
        return _orjson_dumps(payload, option=_DUMPS_OPTIONS)
    except TypeError as exc:  # not JSON-serialisable, or a lone surrogate in a string
        raise InvalidEvent(f"event {i}: payload is not storable JSON: {exc}") from None


def _suspects_check(i: int, payload: dict, raw: bytes) -> None:
    # find, not ``in``: a bytes operand of ``in`` is first tried as an integer, and the TypeError
    # raised and cleared costs more than the search.
    if raw.find(b"null") >= 0:
        # orjson writes NaN and Infinity as null; only when a null appears is the slower check
        # needed to tell a real null from a number that JSON cannot represent.
        try:
            json.dumps(payload, allow_nan=False)
        except ValueError as exc:
            raise InvalidEvent(f"event {i}: payload is not storable JSON: {exc}") from None
    if raw.find(b"\\u0000") >= 0 and _has_nul(payload):
        # NUL cannot be held by PostgreSQL text (nor jsonb); refusing it on every backend keeps logs portable.
        raise InvalidEvent(f"event {i}: payload contains a NUL character (\\u0000), which the store does not hold")


def _batch_check(appended: list[Event], encoded: list[bytes]) -> None:
    """``_suspects_check`` for a batch: one scan of all the texts, and per event only if it finds something."""
    if len(encoded) == 1:
        _suspects_check(0, appended[0].payload, encoded[0])
        return
    blob = b"".join(encoded)
    if b"null" in blob or b"\\u0000" in blob:
        for i, (ev, raw) in enumerate(zip(appended, encoded)):
            _suspects_check(i, ev.payload, raw)


# The hash chain (runs/chain.py): the run row keeps the head, and the fence, which already reads
# and moves that row under its lock, hashes the event's canonical bytes (framed by the client,
# runs.canonical) onto it and hands the new head to the insert as the event's hash. No extra round trip, and two
# appends cannot chain from the same head, because the second waits on the first's row lock and
# then fails the last_seq check. A NULL head at last_seq 0 is the run's genesis; a NULL head after
# that is a run recorded before the chain existed, whose appends stay unchained (NULL) until
# ``manage.py chain_backfill`` chains the run.
_PG_PREV_HEAD = "COALESCE(head, CASE WHEN last_seq = 0 THEN sha256(convert_to('reckon/chain/v3' || chr(10) || run_id, 'UTF8')) END)"

# The fence: the run row's lock, checked and moved in the same statement as the insert.
_PG_FENCE = f"""
WITH fence AS (
    UPDATE reckon_run
       SET last_seq = %(new_last)s,
           finished_seq = COALESCE(finished_seq, %(finished_seq)s),
           head = sha256({_PG_PREV_HEAD} || %(canon)s),
           payload_bytes = payload_bytes + %(nbytes)s
     WHERE run_id = %(run_id)s
       AND lease_epoch = %(epoch)s
       AND lease_holder <> ''
       AND last_seq = %(expected)s
       AND payload_bytes <= %(room)s
       AND (NOT %(finishing)s OR finished_seq IS NULL)
 RETURNING run_id, head
)
"""

# A batch travels as four binary arrays (types, versions, times, payload texts; see
# ``_binary_arrays``), seqs are the ordinality. Each payload is parsed once, by the json column's
# input (a single JSON document unpacked with json_to_recordset cost the server a second parse).
#
# The chain of a batch (its events' canonical bytes) is hashed by reckon_chain() (migration runs 0008) from the head the locking
# read returns; the update then moves the head to the batch's last hash. FOR UPDATE in READ
# COMMITTED re-reads a row another transaction changed meanwhile and re-checks the fence on it, as
# the UPDATE alone would, so the chain always starts from the head the fence accepted.
_PG_APPEND = f"""
WITH locked AS (
    SELECT run_id, reckon_chain({_PG_PREV_HEAD}, %(canons)b::bytea[]) AS hs
      FROM reckon_run
     WHERE run_id = %(run_id)s
       AND lease_epoch = %(epoch)s
       AND lease_holder <> ''
       AND last_seq = %(expected)s
       AND payload_bytes <= %(room)s
       AND (NOT %(finishing)s OR finished_seq IS NULL)
       FOR UPDATE
), fence AS (
    UPDATE reckon_run r
       SET last_seq = %(new_last)s,
           finished_seq = COALESCE(r.finished_seq, %(finished_seq)s),
           head = locked.hs[%(count)s],
           payload_bytes = r.payload_bytes + %(nbytes)s
      FROM locked
     WHERE r.run_id = locked.run_id
 RETURNING r.run_id
)
INSERT INTO reckon_event (run_id, seq, type, v, ts, payload, epoch, hash)
SELECT fence.run_id, %(expected)s + e.n, e.t, e.v, e.ts, e.p::json, %(epoch)s, locked.hs[e.n]
  FROM fence
 CROSS JOIN locked
 CROSS JOIN unnest(%(types)b::text[], %(vs)b::smallint[], %(tss)b::timestamptz[], %(payloads)b::text[])
       WITH ORDINALITY AS e(t, v, ts, p, n)
"""

# The batch append with the chain linked by the appending process, from the head it already knows
# (``_heads``: the head its own last append to the run left). The fence adds ``head = the head the
# links started from`` to ``last_seq = expected``, so a stale or wrong head writes nothing, exactly
# like a stale seq; ``_pg_append`` then appends the ordinary way (``_PG_APPEND_HEADED``, linked by
# ``reckon_chain`` in the database), whose refusal is diagnosed as before. Linking 100 events
# costs the appending process about 45 us and ``reckon_chain`` about 230 us of the server's time.
_PG_APPEND_LINKED = f"""
WITH fence AS (
    UPDATE reckon_run
       SET last_seq = %(new_last)s,
           finished_seq = COALESCE(finished_seq, %(finished_seq)s),
           head = %(head)s,
           payload_bytes = payload_bytes + %(nbytes)s
     WHERE run_id = %(run_id)s
       AND lease_epoch = %(epoch)s
       AND lease_holder <> ''
       AND last_seq = %(expected)s
       AND payload_bytes <= %(room)s
       AND (NOT %(finishing)s OR finished_seq IS NULL)
       AND {_PG_PREV_HEAD} = %(prev)s
 RETURNING run_id
)
INSERT INTO reckon_event (run_id, seq, type, v, ts, payload, epoch, hash)
SELECT fence.run_id, %(expected)s + e.n, e.t, e.v, e.ts, e.p::json, %(epoch)s, e.h
  FROM fence
 CROSS JOIN unnest(%(types)b::text[], %(vs)b::smallint[], %(tss)b::timestamptz[], %(payloads)b::text[], %(hashes)b::bytea[])
       WITH ORDINALITY AS e(t, v, ts, p, h, n)
"""

# ``_PG_APPEND`` answering with the rows it inserted and the head it left, so that the next batch
# of this process can link its own chain (``_PG_APPEND_LINKED``).
_PG_APPEND_HEADED = _PG_APPEND.replace("\nINSERT INTO reckon_event", ", ins AS (\nINSERT INTO reckon_event") + " RETURNING 1\n)\nSELECT (SELECT count(*) FROM ins), (SELECT hs[%(count)s] FROM locked)"

# (database alias, run id) -> (last seq, head) after this process's last batch append to the run.
# Only ever a hint: the fence checks it, so an entry made stale by another writer, a rolled-back
# transaction or a rebuilt database costs one refused statement and nothing else.
_heads: dict[tuple[str, str], tuple[int, bytes]] = {}
_HEADS_MAX = 4096


def _head_remember(alias: str, run_id: str, last_seq: int, head) -> None:
    if head is None:  # a run recorded before the chain: its appends stay unchained
        return
    if len(_heads) >= _HEADS_MAX:
        _heads.clear()
    _heads[(alias, run_id)] = (last_seq, bytes(head))


# The same statement for one event, with scalar parameters: unnest over five one-element arrays
# costs more server time than the rest of a single append (measured: 616 vs 476 us a commit).
_PG_APPEND_ONE = (
    _PG_FENCE
    + """
INSERT INTO reckon_event (run_id, seq, type, v, ts, payload, epoch, hash)
SELECT fence.run_id, %(seq)s, %(type)s, %(v)s, %(ts)s, %(payload)s::json, %(epoch)s, fence.head
  FROM fence
"""
)

# The commonest append of all, one event that does not end the run: the fence without the
# terminal-outcome clauses, and seven positional parameters, each used once (the new seq and the
# epoch come back from the fence), as many as the row itself has. A single append is bounded by
# its commit, but client time between two commits counts about double on a small machine (the
# server's side goes idle and has to wake up): measured in one process, this statement saved
# 10-40 us a commit against the general one above.
# The event's canonical bytes are the first parameter (the SET clause comes first).
# The fence of one event that does not end the run; this statement and the projected ones
# (``_pg_append_projected``, ``_pg_append_riding``) all start with it.
_PG_PROJECTED_SET = f"""
WITH fence AS (
    UPDATE reckon_run
       SET last_seq = last_seq + 1,
           head = sha256({_PG_PREV_HEAD} || %b),
           payload_bytes = payload_bytes + %b"""
_PG_PROJECTED_WHERE = """
     WHERE run_id = %b
       AND lease_epoch = %b
       AND lease_holder <> ''
       AND last_seq = %b
       AND payload_bytes <= %b"""
_PG_PROJECTED_HEAD = _PG_PROJECTED_SET + _PG_PROJECTED_WHERE

_PG_APPEND_ONE_PLAIN = (
    _PG_PROJECTED_HEAD
    + """
 RETURNING run_id, last_seq, lease_epoch, head
)
INSERT INTO reckon_event (run_id, seq, type, v, ts, payload, epoch, hash)
SELECT fence.run_id, fence.last_seq, %b, %b, %b, %b::json, fence.lease_epoch, fence.head
  FROM fence
"""
)

# The two hot statements as they were before the chain, for ``bench store`` alone: it measures the
# chain's cost by appending with and without it in one run (``chain_hashing``). Nothing else uses them.
_PG_APPEND_UNCHAINED = """
WITH fence AS (
    UPDATE reckon_run
       SET last_seq = %(new_last)s,
           finished_seq = COALESCE(finished_seq, %(finished_seq)s),
           payload_bytes = payload_bytes + %(nbytes)s
     WHERE run_id = %(run_id)s
       AND lease_epoch = %(epoch)s
       AND lease_holder <> ''
       AND last_seq = %(expected)s
       AND payload_bytes <= %(room)s
       AND (NOT %(finishing)s OR finished_seq IS NULL)
 RETURNING run_id
)
INSERT INTO reckon_event (run_id, seq, type, v, ts, payload, epoch)
SELECT fence.run_id, %(expected)s + e.n, e.t, e.v, e.ts, e.p::json, %(epoch)s
  FROM fence
 CROSS JOIN unnest(%(types)b::text[], %(vs)b::smallint[], %(tss)b::timestamptz[], %(payloads)b::text[])
       WITH ORDINALITY AS e(t, v, ts, p, n)
"""

_PG_APPEND_ONE_PLAIN_UNCHAINED = """
WITH fence AS (
    UPDATE reckon_run
       SET last_seq = last_seq + 1,
           payload_bytes = payload_bytes + %b
     WHERE run_id = %b
       AND lease_epoch = %b
       AND lease_holder <> ''
       AND last_seq = %b
       AND payload_bytes <= %b
 RETURNING run_id, last_seq, lease_epoch
)
INSERT INTO reckon_event (run_id, seq, type, v, ts, payload, epoch)
SELECT fence.run_id, fence.last_seq, %b, %b, %b, %b::json, fence.lease_epoch
  FROM fence
"""

_chain_on = True


@contextmanager
def chain_hashing(*, enabled: bool) -> Iterator[None]:
    """For ``bench store`` only: appends without the hash chain (PostgreSQL, no projector) while
    ``enabled`` is false, so that one run measures the chain's cost. Such events carry no hash and
    their run fails verify_chain: never use it on a database that matters."""
    global _chain_on
    before, _chain_on = _chain_on, enabled
    try:
        yield
    finally:
        _chain_on = before


_SQLITE_FENCE = """
UPDATE reckon_run
   SET last_seq = %s, finished_seq = COALESCE(finished_seq, %s), head = %s, payload_bytes = payload_bytes + %s
 WHERE run_id = %s AND lease_epoch = %s AND lease_holder <> '' AND last_seq = %s AND payload_bytes <= %s
   AND (NOT %s OR finished_seq IS NULL)
"""

_SQLITE_INSERT = "INSERT INTO reckon_event (run_id, seq, type, v, ts, payload, epoch, recorded_at, hash) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"


def _events_prepare(
    run_id: str,
    expected_seq: int,
    events: Sequence[NewEvent],
    key_secret_fill: bool,
    now: datetime,
    ts_texted: list[bytes] | None = None,
):
    """Check, complete and encode a batch for the append (``events_append``, ``events_copy``):
    (times, payload texts, chain canonical bytes, the salts of sealed values by seq, the events as the fold sees them, the seq of a
    terminal event or None, the batch's last seq). Raises InvalidEvent for an event the log must not hold.
    ``ts_texted``: a list extended with each time's text in the chain's frame (``runs.canonical.ts_texts``)."""
    # One pass: check each event, complete its payload to the current version, encode it, and
    # build what the caller gets back. This path runs once per event written; keep it lean (the
    # common case is checked here against ``_PLAIN``; anything unusual takes ``_check_slow``).
    tss: list[datetime] = []
    encoded: list[bytes] = []
    canons: list[bytes] = []
    appended: list[Event] = []
    finished_seq = None
    seq = expected_seq
    plain, current, completes, new_event = _PLAIN, CURRENT_SCHEMA_VERSION, _COMPLETED_TYPES, tuple.__new__
    dumps, fast = _orjson_dumps, _FAST_OPTIONS
    chained = _chain_on
    # Each event's canonical bytes as chained (runs.canonical); an event with sealed values also gets its salts,
    # which are written beside it (EventSeal) in the same transaction.
    sealing = sealing_now() if chained else None
    seals: list[tuple[int, dict]] = []
    stored_sorted = True
    for i, ev in enumerate(events):
        seq += 1
        type_, payload, v = ev.type, ev.payload, ev.v
        spec = plain.get(type_) if type(type_) is str else None
        if spec is None:
            spec = plain_spec(type_, payload)
        if spec is None or seq == 1 or type(payload) is not dict or type(v) is not int or not spec[1] <= v <= current or not payload.keys() >= spec[0]:
            _check_slow(i, seq, run_id, ev)
        if v == current and type_ in completes:
            payload = payload_complete(type_, payload, run_id)
        if seq == 1 and key_secret_fill and v >= KEY_SECRET_SINCE and KEY_SECRET_FIELD not in payload:
            payload = {**payload, KEY_SECRET_FIELD: key_secret_new()}  # seq 1 is run_started (checked above)
        if type_ == _STARTED:
            problem = call_tenant_problem(payload)
            if problem:
                raise InvalidEvent(f"event {i} (seq {seq}, {type_}): {problem}")
        ts = ev.ts or now
        if ts is not now and not isinstance(ts, datetime):
            raise InvalidEvent(f"event {i} (seq {seq}): ts must be a datetime, got {type(ts).__name__}")
        tss.append(ts)
        # Encoded before anything is sent: a payload the store cannot hold refuses the append.
        try:
            encoded.append(dumps(payload, option=fast))
        except TypeError:
            encoded.append(_dumps_full(i, payload))
            stored_sorted = False  # its keys were not all strings: the chain encodes it again
        appended.append(new_event(Event, (seq, type_, payload, ts, v)))
        if finished_seq is None and type_ in _TERMINAL_NAMES:
            finished_seq = seq
    _batch_check(appended, encoded)
    if max(map(len, encoded)) > settings.RECKON_MAX_EVENT_BYTES:
        raise _event_too_large(expected_seq, appended, encoded)
    if ts_texted is not None:
        ts_texted.extend(ts_texts(tss))
    if chained and len(appended) == 1:  # the single append: no batch to scan at once
        ev = appended[0]
        canon, salts = event_canon(seq=ev.seq, type=ev.type, ts=ev.ts, v=ev.v, payload=ev.payload, stored=encoded[0], sealing=sealing, stored_sorted=stored_sorted)
        canons = [canon]
        if salts is not None:
            seals.append((ev.seq, salts))
    elif chained:
        # The chain's canonical bytes, for the whole batch at once (runs.canonical).
        canons, seals = event_canons(
            first_seq=expected_seq + 1,
            types=[e.type for e in appended],
            tss=tss,
            vs=[e.v for e in appended],
            payloads=[e.payload for e in appended],
            stored=encoded,
            stored_sorted=stored_sorted,
            sealing=sealing,
            texts=ts_texted,
        )
    return tss, encoded, canons, seals, appended, finished_seq, seq


# The sizes (reckon/settings.py, "Sizes"): an event's payload is measured as the store writes it,
# the UTF-8 JSON text with its keys sorted (``encoded``), which is the text the chain hashes and a
# read returns; a run's, as the sum of those, kept on the run row (``Run.payload_bytes``). The
# fence moves that sum in the same statement as last_seq and refuses, with everything else it
# refuses, an append after which it would pass the limit: ``payload_bytes <= room``, where room
# is the limit less the batch's bytes. One comparison on the row the fence locks anyway, so a run's
# size costs the append no read and no scan; a refusal is told apart by ``_diagnose``.
_NO_LIMIT = 2**62


def _room(nbytes: int) -> int:
    """The most a run may hold before an append of ``nbytes`` payload bytes is refused."""
    limit = settings.RECKON_MAX_RUN_BYTES
    return limit - nbytes if limit else _NO_LIMIT


def _event_too_large(expected_seq: int, appended: list[Event], encoded: list[bytes]) -> EventTooLarge:
    limit = settings.RECKON_MAX_EVENT_BYTES
    i, size = next((i, len(raw)) for i, raw in enumerate(encoded) if len(raw) > limit)
    seq = expected_seq + i + 1
    return EventTooLarge(
        f"event {i} (seq {seq}, {appended[i].type}): its payload is {size:,} bytes, more than the {limit:,} an event may hold (RECKON_MAX_EVENT_BYTES)",
        seq=seq,
        limit=limit,
        setting="RECKON_MAX_EVENT_BYTES",
    )


def _run_too_large(run_id: str, expected_seq: int, stored: int, sizes: Sequence[int]) -> RunTooLarge:
    limit = settings.RECKON_MAX_RUN_BYTES
    total, seq = stored, expected_seq
    for size in sizes:  # the first event that does not fit
        total += size
        seq += 1
        if total > limit:
            break
    return RunTooLarge(
        f"run {run_id!r} holds {stored:,} bytes of payloads; with event seq {seq} it would hold {total:,}, more than the {limit:,} a run may hold (RECKON_MAX_RUN_BYTES)",
        seq=seq,
        limit=limit,
        setting="RECKON_MAX_RUN_BYTES",
    )


def events_append(*, run_id: str, epoch: int, expected_seq: int, events: Sequence[NewEvent], key_secret_fill: bool = True) -> list[Event]:
    """Append ``events`` to run ``run_id`` as seqs ``expected_seq + 1 ...``, all or none.

    A ``run_started`` of schema version 3 or later that carries no key secret gets a new random one
    (runs.identity), unless ``key_secret_fill`` is false: the importer keeps a log exactly as given.

    Raises StaleEpoch when ``epoch`` is not the run's current (unreleased) lease epoch, SeqConflict
    when ``expected_seq`` is not its last seq, RunFinished for a second terminal event, RunNotFound,
    EventTooLarge and RunTooLarge (RECKON_MAX_EVENT_BYTES, RECKON_MAX_RUN_BYTES) and InvalidEvent;
    in every case nothing is written. Returns the appended events as the fold sees
    them.
    """
    if not events:
        raise InvalidEvent("an append needs at least one event")
    if isinstance(expected_seq, bool) or not isinstance(expected_seq, int) or expected_seq < 0:
        raise InvalidEvent(f"expected_seq must be a whole number >= 0, got {expected_seq!r}")
    now = datetime.now(timezone.utc)
    tss, encoded, canons, seals, appended, finished_seq, seq = _events_prepare(run_id, expected_seq, events, key_secret_fill, now)
    finishing = finished_seq is not None
    seqs = range(expected_seq + 1, seq + 1)
    nbytes = sum(map(len, encoded))
    room = _room(nbytes)

    projectors = _projectors_for(events)
    db = _default_db()
    postgres = db.vendor == "postgresql"
    if not canons and (not postgres or projectors or (seq == expected_seq + 1 and finishing)):
        raise InvalidEvent("an append without the hash chain (chain_hashing) is for bench store's plain PostgreSQL appends only")
    if postgres and projectors and seq == expected_seq + 1 and not finishing and not seals:
        # One event whose read models all have a statement form: one statement in autocommit.
        # False when a projector's condition (or the fence) refused: then the general path below
        # decides, and diagnoses a real fence refusal as before.
        done = _pg_append_projected(db, run_id, epoch, expected_seq, events[0], tss[0], encoded[0], canons[0], appended[0], projectors, room)
        if done:
            return _appended(db, run_id, seqs[0], seqs[-1], appended)
    if postgres and not projectors and not seals:
        # One statement in autocommit (or in the caller's transaction): the fence and the insert
        # commit together or not at all, with no BEGIN/COMMIT round trips.
        ok = _pg_append(db, run_id, epoch, expected_seq, seqs, events, tss, encoded, canons, finished_seq, nbytes, room)
    else:
        # No savepoint inside a caller's transaction: a refused fence returns normally (nothing
        # was written), and any error here must undo the caller's whole transaction anyway, since
        # its read models would no longer match the log. That saves two round trips per append.
        riders = _riders_for(projectors, run_id, appended) if postgres and _RIDER_FORMS and canons and not finishing else None
        with transaction.atomic(savepoint=False):
            if riders:
                results = _pg_append_riding(db, run_id, epoch, expected_seq, events, tss, encoded, canons, riders, nbytes, room)
                ok = results is not None
            elif postgres:
                ok = _pg_append(db, run_id, epoch, expected_seq, seqs, events, tss, encoded, canons, finished_seq, nbytes, room)
            else:
                ok = _sqlite_append(run_id, epoch, expected_seq, seqs, events, tss, encoded, canons, finished_seq, now, nbytes=nbytes, room=room)
            if ok and seals:
                _seals_write(run_id, seals)
            if ok:
                for project in projectors:
                    rider = riders.get(project) if riders else None
                    if rider is None:
                        project(run_id, appended, epoch)
                    else:
                        rider.then(results[project])
    if ok:
        return _appended(db, run_id, seqs[0], seqs[-1], appended)
    raise _fence_refused(run_id, epoch, expected_seq, finishing, encoded)


def _appended(db, run_id: str, first_seq: int, last_seq: int, appended: list[Event]) -> list[Event]:
    """How every append that wrote its events ends (``events_append``, ``events_copy``): the
    after-append hooks, and the events as the fold sees them returned."""
    if _AFTER_APPEND:
        _after_append(db, run_id, first_seq, last_seq)
    return appended


def _seals_write(run_id: str, seals: list[tuple[int, dict]]) -> None:
    # An event with sealed values is rare (a call naming a sensitive field, a run's start): its
    # salts take one more statement, inside the append's transaction, and never touch the event row.
    with connection.cursor() as cur:
        cur.executemany("INSERT INTO reckon_event_seal (run_id, seq, salts) VALUES (%s, %s, %s)", [(run_id, seq, json.dumps(salts, sort_keys=True)) for seq, salts in seals])


def _copy_text(value: bytes) -> bytes:
    # COPY's text format: a backslash, tab, newline or carriage return in a field is escaped.
    if b"\\" in value:
        value = value.replace(b"\\", b"\\\\")
    if b"\t" in value or b"\n" in value or b"\r" in value:
        value = value.replace(b"\t", b"\\t").replace(b"\n", b"\\n").replace(b"\r", b"\\r")
    return value


def _ts_written(tss: list[datetime], framed: list[bytes]) -> list[bytes]:
    """The times' texts as COPY (``events_copy``) sends them: the
    chain frame's (``framed``, RFC 3339 in UTC, read back as the same timestamptz), but isoformat's
    for a batch with a year before 1000, which the frame's text does not pad to four digits."""
    if all(ts.year >= 1000 for ts in tss):
        return framed
    return [ts.isoformat().encode() for ts in tss]


_PG_COPY_FENCE = "SELECT lease_epoch, lease_holder, last_seq, finished_seq, head, payload_bytes FROM reckon_run WHERE run_id = %s FOR UPDATE"
_PG_COPY = "COPY reckon_event (run_id, seq, type, v, ts, payload, epoch, hash) FROM STDIN"
_PG_COPY_MOVE = "UPDATE reckon_run SET last_seq = %s, head = %s, finished_seq = COALESCE(finished_seq, %s), payload_bytes = payload_bytes + %s WHERE run_id = %s"


def events_copy(
    *,
    run_id: str,
    epoch: int,
    expected_seq: int,
    events: Sequence[NewEvent],
    key_secret_fill: bool = True,
    meanwhile: Callable[[], None] | None = None,
) -> list[Event]:
    """``events_append`` for a large batch on PostgreSQL, written with COPY; the same checks,
    errors, chain and read models. Only inside a transaction (the importer's): the fence is the
    run row's lock, taken first and held until that transaction ends, so no other writer can
    append between the check and the rows COPY writes, and the unique (run, seq) key still
    refuses any row that would fork the log. The chain is hashed here, from the head the lock
    read, with ``runs.verify``'s own link.

    ``meanwhile``: called once the rows are sent, while the server checks and inserts them, before
    the COPY's end is awaited (the importer reads its next chunk then). It may not use the
    connection; an exception it raises ends the COPY unwritten and propagates."""
    db = connections[DEFAULT_DB_ALIAS]
    if db.vendor != "postgresql" or not db.in_atomic_block:
        raise InvalidEvent("events_copy is for PostgreSQL, inside a transaction; use events_append")
    if not events:
        raise InvalidEvent("an append needs at least one event")
    times: list[bytes] = []
    tss, encoded, canons, seals, appended, finished_seq, seq = _events_prepare(run_id, expected_seq, events, key_secret_fill, datetime.now(timezone.utc), times)
    if not canons:
        raise InvalidEvent("an append without the hash chain (chain_hashing) is for bench store's plain PostgreSQL appends only")
    with server_cursor() as cur:
        cur.execute(_PG_COPY_FENCE, [run_id])
        row = cur.fetchone()
        if row is None:
            raise RunNotFound(run_id)
        current_epoch, holder, last_seq, stored_finish, head, stored_bytes = row
        nbytes = sum(map(len, encoded))
        if current_epoch != epoch or not holder or last_seq != expected_seq or (finished_seq is not None and stored_finish is not None) or stored_bytes > _room(nbytes):
            raise _fence_refused(run_id, epoch, expected_seq, finished_seq is not None, encoded)
        # A NULL head after seq 0: a run recorded before the chain, whose appends stay unchained.
        prev = bytes(head) if head is not None else (chain_genesis(run_id) if expected_seq == 0 else None)
        rid = _copy_text(run_id.encode())
        if prev is not None:
            linked = chain_links_framed(prev, canons, b"")  # the hashes, one after another
            prev = linked[-32:]
            hexed = linked.hex().encode()
            hashed = [b"\\\\x" + hexed[i : i + 64] for i in range(0, len(hexed), 64)]
        else:
            hashed = [b"\\N"] * len(canons)
        # COPY's text format escapes a backslash, tab, newline or carriage return in a field: the
        # chunk's payload texts are escaped together, a few C passes instead of calls per event.
        # JSON text holds no NUL (a control character is always escaped), so NUL separates them.
        copied = _copy_text(b"\x00".join(encoded)).split(b"\x00")
        times = _ts_written(tss, times)
        line = b"%b\t%d\t%b\t%d\t%b\t%b\t%d\t%b\n"
        rows = [line % (rid, ev.seq, ev.type.encode(), ev.v, ts, text, epoch, h) for ev, ts, text, h in zip(appended, times, copied, hashed, strict=True)]
        # Flushed as written (no threshold): once ``write`` returns, every row is on its way to the
        # server, which works through them while ``meanwhile`` runs here.
        with cur.copy(_PG_COPY, writer=LibpqWriter(cur, flush_threshold=0)) as copy:
            copy.write(b"".join(rows))
            del rows
            if meanwhile is not None:
                meanwhile()
        cur.execute(_PG_COPY_MOVE, [seq, prev, finished_seq, nbytes, run_id])
        _head_remember(db.alias, run_id, seq, prev)
    if seals:
        _seals_write(run_id, seals)
    for project in _projectors_for(events):
        project(run_id, appended, epoch)
    return _appended(db, run_id, expected_seq + 1, seq, appended)


def _sqlite_datetime(value: datetime) -> str:
    """Django's SQLite text for a datetime (``adapt_datetimefield_value`` with the connection in
    UTC: naive in UTC, then ``str``) without its per-value checks, which cost a few microseconds an
    event on an import; anything but a time in UTC goes through Django's own."""
    if value.tzinfo is timezone.utc:
        return value.replace(tzinfo=None).isoformat(" ")
    return connection.ops.adapt_datetimefield_value(value)


def _sqlite_append(run_id, epoch, expected_seq, seqs, events, tss, payloads, canons, finished_seq, now, *, nbytes: int, room: int) -> bool:
    # Inside an IMMEDIATE transaction: the write lock is held from BEGIN, so the fence and the
    # inserts cannot interleave with another writer, and the head read here is the one the fence
    # moves. The chain is hashed in Python (SQLite has no sha256).
    with connection.cursor() as cur:
        cur.execute("SELECT head FROM reckon_run WHERE run_id = %s", [run_id])
        row = cur.fetchone()
        prev = row[0] if row is not None else None
        if prev is None and expected_seq == 0:
            prev = chain_genesis(run_id)
        hashes = chain_links(bytes(prev), canons) if prev is not None else [None] * len(canons)
        prev = hashes[-1]
        cur.execute(_SQLITE_FENCE, [seqs[-1], finished_seq, prev, nbytes, run_id, epoch, expected_seq, room, finished_seq is not None])
        if cur.rowcount != 1:
            return False
        adapt = _sqlite_datetime if connection.timezone_name == "UTC" else connection.ops.adapt_datetimefield_value
        rec = adapt(now)
        rows = [(run_id, s, ev.type, ev.v, adapt(t), p.decode(), epoch, rec, h) for s, ev, t, p, h in zip(seqs, events, tss, payloads, hashes)]
        cur.executemany(_SQLITE_INSERT, rows)
    return True


def _append_cursor(db) -> psycopg.Cursor:
    """The psycopg cursor the append path uses on ``db``'s current connection.

    A plain psycopg cursor (server-side binding, so the statement is prepared once per connection
    and the arrays travel in binary, with no per-element escaping), kept for as long as the
    connection lives: building one per call cost about a tenth of a single append. A Django
    connection belongs to one thread, and so does this cursor.
    """
    raw = db.connection
    if raw is None:
        db.ensure_connection()
        raw = db.connection
    cur = db.__dict__.get("_reckon_append_cursor")
    if cur is None or cur.connection is not raw or cur.closed:
        cur = psycopg.Cursor(raw)
        for cls, dumper in ARRAY_DUMPERS.items():
            cur.adapters.register_dumper(cls, dumper)
        db.__dict__["_reckon_append_cursor"] = cur
    return cur


# --- the single append's statement, sent through libpq directly ---------------------------------
#
# A single append is bounded by its commit, and the client's time between two commits counts
# about double on a small machine (the server's side goes idle and has to wake). psycopg's cursor
# spends about 25 us of Python per execute on work this path does not need: converting the query
# and its parameters generically, looking the statement up in its prepared-statement cache,
# building result objects. ``_single_execute`` prepares each of the hot single-event statements
# once per connection under its own name and sends it with ``PQsendQueryPrepared``, its
# parameters encoded here for the few types these statements carry; anything else (another
# type, preparing turned off for a connection proxy, a transaction psycopg has still to begin)
# takes the cursor as before. Either way it is the same statement, the same parameters, the same
# single round trip, and Django's error types.

_TX_IDLE, _TX_INTRANS = TransactionStatus.IDLE, TransactionStatus.INTRANS
_RESULT_FATAL, _RESULT_TUPLES = ExecStatus.FATAL_ERROR, ExecStatus.TUPLES_OK
_DIAG_SQLSTATE = DiagnosticField.SQLSTATE
_OID_BOOL, _OID_BYTEA, _OID_INT8, _OID_TEXT, _OID_TIMESTAMPTZ = 16, 17, 20, 25, 1184
_pack_int8 = struct.Struct(">q").pack
_PG_EPOCH = datetime(2000, 1, 1, tzinfo=timezone.utc)
_BOOL_BYTES = {True: b"\x01", False: b"\x00"}


@functools.lru_cache(maxsize=256)
def _numbered_text(sql: str) -> bytes | None:
    """The statement's text with psycopg's ``%b`` marks numbered for libpq (None: a text this path
    does not send, e.g. one with named parameters)."""
    pieces = sql.split("%b")
    if any("%" in piece for piece in pieces):
        return None
    out = [pieces[0]]
    for i, piece in enumerate(pieces[1:], 1):
        out.append(f"${i}")
        out.append(piece)
    return "".join(out).encode()


def _timestamptz(value: datetime) -> bytes:
    # timestamptz's binary form, microseconds since 2000-01-01 UTC: isoformat's text cost about
    # 12,000 instructions a value, more than the rest of the encoding together. A naive time
    # raises TypeError here and is left to the cursor (which sends it as a timestamp).
    d = value - _PG_EPOCH
    return _pack_int8((d.days * 86400 + d.seconds) * 1_000_000 + d.microseconds)


# By Python type: the encoder, the format (1: binary) and the type oid, as psycopg's binary dumpers
# send them (text as UTF-8, integers as int8, bytes as bytea). Encoders are C functions but one.
_LEAN_ENCODERS: dict[type, tuple[Callable, int, int]] = {
    str: (str.encode, 1, _OID_TEXT),
    int: (_pack_int8, 1, _OID_INT8),
    bytes: (bytes, 1, _OID_BYTEA),
    bool: (_BOOL_BYTES.__getitem__, 1, _OID_BOOL),
    datetime: (_timestamptz, 1, _OID_TIMESTAMPTZ),
}


@functools.lru_cache(maxsize=256)
def _lean_spec(kinds: tuple) -> tuple | None:
    """(encoders, formats, type oids) for parameters of these Python types, or None when one has no encoder."""
    found = [_LEAN_ENCODERS.get(k) for k in kinds]
    if None in found:
        return None
    return tuple(f[0] for f in found), [f[1] for f in found], tuple(f[2] for f in found)


def _lean_params(params: Sequence) -> tuple[list, list, tuple] | None:
    """``params`` for ``PQsendQueryPrepared``: values, formats and type oids; None for a value of
    another type, or one these encoders refuse (a lone surrogate, an integer beyond int8, a naive
    time): the cursor then sends it, with psycopg's own handling and errors."""
    spec = _lean_spec(tuple(map(type, params)))
    if spec is None:
        return None
    encoders, formats, types = spec
    try:
        return [enc(p) for enc, p in zip(encoders, params)], formats, types
    except (UnicodeEncodeError, struct.error, TypeError, OverflowError):
        return None


def _prepared_names(conn):
    """psycopg's own map of the statements prepared on ``conn`` (key -> name), or None.

    The single append's statements are entered in it under keys of their own, because psycopg
    forgets its statements wholesale (a rollback, a DISCARD ALL, a DROP or ALTER: it then sends
    DEALLOCATE ALL, within the same call) and evicts the least used ones, deallocating them, and
    empties or trims this map when it does: a statement found here is one the server still holds.
    Private to psycopg (pinned in pyproject): when its shape is not the one expected, this path is
    not taken at all and every statement goes through the cursor."""
    names = getattr(getattr(conn, "_prepared", None), "_names", None)
    return names if isinstance(names, OrderedDict) else None


_lean_counter = itertools.count()


def _single_execute(db, sql: str, params: Sequence, *, again: bool = True) -> int:
    """Run one of the single append's statements (``%b`` marks, positional ``params``) on
    ``db`` and return its row count (rows written, or rows returned by a SELECT)."""
    conn = db.connection
    if conn is None:
        db.ensure_connection()
        conn = db.connection
    pgconn = conn.pgconn
    status = pgconn.transaction_status
    # Not in pipeline mode (Django never uses it), nor with preparing turned off.
    names = _prepared_names(conn) if conn.prepare_threshold is not None and getattr(conn, "_pipeline", None) is None else None
    # Autocommit, or a transaction psycopg has already begun: outside autocommit psycopg sends
    # BEGIN before a transaction's first statement, which only the cursor does.
    lean = names is not None and (status == _TX_INTRANS or (status == _TX_IDLE and conn.autocommit))
    encoded = _lean_params(params) if lean else None
    text = _numbered_text(sql) if encoded is not None else None
    if text is None:
        cur = _append_cursor(db)
        with db.wrap_database_errors:
            cur.execute(sql, params, prepare=True)
        return cur.rowcount
    values, formats, types = encoded
    key = (_LEAN_KEY, sql, types)
    with db.wrap_database_errors:
        name = names.get(key)
        if name is None:
            name = b"reckon_single_%d" % next(_lean_counter)
            pgconn.send_prepare(name, text, param_types=types)
            _lean_result(conn, conn.wait(_pg_execute(pgconn))[-1])
            names[key] = name
        else:
            names.move_to_end(key)  # psycopg evicts the least recently used first
        pgconn.send_query_prepared(name, values, param_formats=formats)
        res = conn.wait(_pg_execute(pgconn))[-1]
        if res.status == _RESULT_FATAL and res.error_field(_DIAG_SQLSTATE) == b"26000":
            # The statement is gone behind psycopg's back: forget it. Inside a transaction the
            # error has aborted it and is raised; in autocommit the statement is prepared again.
            names.pop(key, None)
            if status == _TX_IDLE and again:
                return _single_execute(db, sql, params, again=False)
        return _lean_result(conn, res)


_LEAN_KEY = "reckon.store single append"


def _lean_result(conn, res) -> int:
    if res.status == _RESULT_FATAL:
        raise _error_from_result(res, encoding=conn.info.encoding)
    if res.status == _RESULT_TUPLES:
        return res.ntuples
    return res.command_tuples or 0


def _pg_append(db, run_id, epoch, expected_seq, seqs, events, tss, encoded, canons, finished_seq, nbytes, room) -> bool:
    if len(seqs) == 1 and finished_seq is None:
        ev = events[0]
        if canons:
            count = _single_execute(db, _PG_APPEND_ONE_PLAIN, [canons[0], nbytes, run_id, epoch, expected_seq, room, ev.type, ev.v, tss[0], encoded[0].decode()])
        else:  # chain_hashing(enabled=False): bench store only
            count = _single_execute(db, _PG_APPEND_ONE_PLAIN_UNCHAINED, [nbytes, run_id, epoch, expected_seq, room, ev.type, ev.v, tss[0], encoded[0].decode()])
        return count == 1
    params = {
        "new_last": seqs[-1],
        "finished_seq": finished_seq,
        "run_id": run_id,
        "epoch": epoch,
        "expected": expected_seq,
        "finishing": finished_seq is not None,
        "nbytes": nbytes,
        "room": room,
    }
    if len(seqs) == 1:
        sql = _PG_APPEND_ONE
        params.update(seq=seqs[0], type=events[0].type, v=events[0].v, ts=tss[0], payload=encoded[0].decode(), canon=canons[0])
    elif canons:
        return _pg_append_batch(db, run_id, expected_seq, seqs, events, tss, encoded, canons, params)
    else:  # chain_hashing(enabled=False): bench store only
        sql = _PG_APPEND_UNCHAINED
        params.update(binary_arrays(events, tss, encoded))
    cur = _append_cursor(db)
    with db.wrap_database_errors:  # Django's exception types, as from any other query
        cur.execute(sql, params, prepare=True)
    return cur.rowcount == len(seqs)


def _pg_append_batch(db, run_id, expected_seq, seqs, events, tss, encoded, canons, params) -> bool:
    """The chained batch append: linked here from a known head when there is one
    (``_PG_APPEND_LINKED``), otherwise, or when that head turns out stale, by the database."""
    n = len(seqs)
    params.update(binary_arrays(events, tss, encoded))
    key = (db.alias, run_id)
    known = _heads.get(key)
    cur = _append_cursor(db)
    if expected_seq == 0 or (known is not None and known[0] == expected_seq):
        start = chain_genesis(run_id) if expected_seq == 0 else known[1]
        framed = chain_links_framed(start, canons, HASH_ITEM_PREFIX)
        prev = framed[-32:]
        with db.wrap_database_errors:
            cur.execute(_PG_APPEND_LINKED, {**params, "prev": start, "head": prev, "hashes": hashes_array(n, framed)}, prepare=True)
        if cur.rowcount == n:
            _heads[key] = (seqs[-1], prev)
            return True
        # Refused: the fence (a stale seq or epoch, to be diagnosed) or only the head this process
        # remembered. Either way nothing was written; the database's own linking decides.
        _heads.pop(key, None)
    with db.wrap_database_errors:
        cur.execute(_PG_APPEND_HEADED, {**params, "canons": bytea_array(canon_list(canons)), "count": n}, prepare=True)
        count, head = cur.fetchone()
    if count != n:
        return False
    _head_remember(db.alias, run_id, seqs[-1], head)
    return True


_PG_PROJECTED_EVENT = """
 RETURNING run_id, last_seq, lease_epoch, head
), ev AS (
    INSERT INTO reckon_event (run_id, seq, type, v, ts, payload, epoch, hash)
    SELECT fence.run_id, fence.last_seq, %b, %b, %b, %b::json, fence.lease_epoch, fence.head
      FROM fence
 RETURNING run_id, seq, epoch
)"""


def _pg_append_projected(db, run_id, epoch, expected_seq, ev: NewEvent, ts, encoded: bytes, canon: bytes, appended: Event, projectors, room: int) -> bool | None:
    """The single-event append with its projectors' statement forms (``StatementPart``) in one
    statement: the fence, the insert and the read models commit together, in one round trip.
    None when a projector has no statement form for this event; False when the statement wrote
    nothing (a refused fence, or a projector's condition)."""
    parts = []
    for project in projectors:
        form = _STATEMENT_FORMS.get(project)
        part = form(run_id, appended) if form is not None else None
        if part is None:
            return None
        parts.append(part)
    # The statement's text depends only on the parts' texts (a start, a completion, with or
    # without a tenant to record), so it is assembled once per shape.
    sql = _projected_text(tuple((part.set, part.condition, part.cte) for part in parts))
    params = [canon, len(encoded)]
    for part in parts:
        if part.set_params:
            params.extend(part.set_params)
    params += [run_id, epoch, expected_seq, room]
    for part in parts:
        if part.condition_params:
            params.extend(part.condition_params)
    params += [ev.type, ev.v, ts, encoded.decode()]
    for part in parts:
        if part.cte_params:
            params.extend(part.cte_params)
    return _single_execute(db, sql, params) == 1


# Bounded: texts with values written into them would grow the cache forever.
@functools.lru_cache(maxsize=256)
def _projected_text(shape: tuple) -> str:
    """The projected append's statement for parts of these (set, condition, cte) texts; their
    parameters go in that order: the sets', the fence's, the conditions', the event's, the ctes'."""
    sql = [_PG_PROJECTED_SET]
    for set_, _, _ in shape:
        if set_:
            sql.append(f",\n           {set_}")
    sql.append(_PG_PROJECTED_WHERE)
    for _, condition, _ in shape:
        if condition:
            sql.append(f"\n       AND {condition}")
    sql.append(_PG_PROJECTED_EVENT)
    for i, (_, _, cte) in enumerate(shape):
        if cte:
            sql.append(f", p{i} AS (\n{cte}\n)")
    sql.append("\nSELECT 1 FROM ev")
    return "".join(sql)


def _riders_for(projectors, run_id: str, appended: list[Event]) -> dict[Projector, Rider]:
    found = {}
    for project in projectors:
        form = _RIDER_FORMS.get(project)
        rider = form(run_id, appended) if form is not None else None
        if rider is not None:
            found[project] = rider
    return found


# The fenced batch append of ``_PG_APPEND`` with the inserted rows named ``ev`` for riders.
_PG_APPEND_EV = _PG_APPEND.replace("\nINSERT INTO reckon_event", ", ev AS (\nINSERT INTO reckon_event") + " RETURNING run_id, seq, epoch\n)"


def _pg_append_riding(db, run_id, epoch, expected_seq, events, tss, encoded, canons, riders: dict[Projector, Rider], nbytes: int, room: int) -> dict | None:
    """The fenced append (no terminal event) with its riders' ctes in the same statement, inside
    the append's transaction; each rider's result by projector, or None when the fence refused."""
    n = len(events)
    if n == 1:
        # The single append's statement, positional parameters.
        ev = events[0]
        sql = [_PG_PROJECTED_HEAD, _PG_PROJECTED_EVENT]
        params: list | dict = [canons[0], nbytes, run_id, epoch, expected_seq, room, ev.type, ev.v, tss[0], encoded[0].decode()]
    else:
        sql = [_PG_APPEND_EV]
        params = {"new_last": expected_seq + n, "finished_seq": None, "run_id": run_id, "epoch": epoch, "expected": expected_seq, "finishing": False, "count": n, "nbytes": nbytes, "room": room}
        params.update(binary_arrays(events, tss, encoded), canons=bytea_array(canon_list(canons)))
    texts = []
    for i, rider in enumerate(riders.values()):
        texts.append((f", r{i} AS (\n{rider.cte}\n)", rider.cte_params))
    results = ", ".join(rider.result.format(cte=f"r{i}") for i, rider in enumerate(riders.values()))
    texts.append((f"\nSELECT (SELECT count(*) FROM ev), {results}", tuple(p for rider in riders.values() for p in rider.result_params)))
    k = 0
    for text, ps in texts:
        if isinstance(params, list):
            sql.append(text)
            params.extend(ps)
            continue
        # The batch statement names its parameters: the riders' positional marks are named in turn.
        pieces = text.split("%b")
        assert len(pieces) == len(ps) + 1, "a rider's parameters must match its %b marks"
        out = [pieces[0]]
        for value, piece in zip(ps, pieces[1:]):
            out.append(f"%(rider{k})b{piece}")
            params[f"rider{k}"] = value
            k += 1
        sql.append("".join(out))
    cur = _append_cursor(db)
    with db.wrap_database_errors:
        cur.execute("".join(sql), params, prepare=True)
        row = cur.fetchone()
    if row is None or row[0] != n:
        return None
    return dict(zip(riders, row[1:]))


def _fence_refused(run_id: str, epoch: int, expected_seq: int, finishing: bool, encoded: Sequence[bytes]) -> Exception:
    """What a refused fence means (``_diagnose``), recorded (``_record_fenced``): the error an
    append that wrote nothing raises. ``encoded``: the batch's payload texts, for the run's size."""
    error = _diagnose(cur_run_id=run_id, epoch=epoch, expected_seq=expected_seq, finishing=finishing, sizes=[len(raw) for raw in encoded])
    _record_fenced(run_id, epoch, error)
    return error


def _diagnose(*, cur_run_id: str, epoch: int, expected_seq: int, finishing: bool, sizes: Sequence[int] = ()) -> Exception:
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
    if finishing and finished_seq is not None:
        return RunFinished(run_id=cur_run_id, finished_seq=finished_seq, current_epoch=current_epoch, last_seq=last_seq)
    if stored_bytes > _room(sum(sizes)):
        return _run_too_large(cur_run_id, expected_seq, stored_bytes, sizes)
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


# --- reading ----------------------------------------------------------------------------------


def _sqlite_ts(value) -> datetime:
    # Django's SQLite backend converts the column to a naive datetime in UTC.
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def payload_loads(text):
    """A stored payload's text decoded: orjson, or json for what orjson does not read.

    orjson refuses a number that overflows a double (1e400), which json reads as infinity. (The
    store never writes one, nor an integer beyond 64 bits, which orjson would read as a float:
    ``events_append`` refuses both.)
    """
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


class _OrjsonLoader(Loader):
    """The json column decoded by orjson as psycopg reads each row: orjson.loads itself is the
    loader, so no Python frame runs per payload."""

    format = Format.BINARY  # a json value's binary form is its text
    load = staticmethod(orjson.loads)


# Rows selected in Event's field order become Events with no Python frame per row.
_EVENT_ROW = functools.partial(tuple.__new__, Event)


def _event_rows(_cursor) -> Callable:
    return _EVENT_ROW


# The same statement on both engines; PostgreSQL's fallback reads the payload as text.
_READ = "SELECT seq, type, payload, ts, v FROM reckon_event WHERE run_id = %s AND seq > %s AND seq <= %s ORDER BY seq"
_PG_READ_TEXT = "SELECT seq, type, payload::text, ts, v FROM reckon_event WHERE run_id = %s AND seq > %s AND seq <= %s ORDER BY seq"


def events_read(*, run_id: str, after: int = 0, upto: int | None = None) -> list[Event]:
    """The run's stored events with ``after < seq <= upto``, decoded, in seq order.

    Events are returned as stored, each with the schema version it was written with; use
    ``events_load`` for events read as the current version.
    """
    upto = upto if upto is not None else 2**62
    db = connections[DEFAULT_DB_ALIAS]
    if db.vendor == "postgresql":
        # Binary rows from a prepared statement, each payload decoded by orjson as the row is read
        # and each row made an Event, both without Python code per row: the read side of a replay
        # is mostly JSON decoding, and this is the cheapest honest version of it. The payload
        # column is json, so its text arrives exactly as it was written.
        # The collector is paused from the fetch on: its rows, like the decoded events, are many
        # small objects that all stay alive, and would only be scanned again and again.
        with gc_paused(), server_cursor() as cur:
            cur.adapters.register_loader("json", _OrjsonLoader)
            cur.row_factory = _event_rows
            try:
                cur.execute(_READ, [run_id, after, upto], prepare=True, binary=True)
                return cur.fetchall()
            except orjson.JSONDecodeError:  # a payload only json reads (see payload_loads)
                cur.row_factory = tuple_row
                cur.execute(_PG_READ_TEXT, [run_id, after, upto], binary=True)
                return [Event(s, t, payload_loads(p), ts, v) for s, t, p, ts, v in cur.fetchall()]
    with gc_paused():
        with db.cursor() as cur:
            cur.execute(_READ, [run_id, after, upto])
            rows = cur.fetchall()
        return [Event(s, t, payload_loads(p), _sqlite_ts(ts), v) for s, t, p, ts, v in rows]


def events_load(*, run_id: str, after: int = 0, upto: int | None = None) -> list[Event]:
    """``events_read`` upcast to the current schema version: what the fold consumes."""
    return events_upcast(events_read(run_id=run_id, after=after, upto=upto), run_id)


# What a replay folds: Event's columns, the timestamp only of the types whose rule reads it (type
# names from the registry, so literals).
_REPLAY_TYPES = ", ".join(f"'{t}'" for t in sorted(TIMESTAMPED))
_REPLAY = f"SELECT seq, type, payload, CASE WHEN type IN ({_REPLAY_TYPES}) THEN ts END, v FROM reckon_event WHERE run_id = %s AND seq > %s AND seq <= %s ORDER BY seq"
_PG_REPLAY_TEXT = _REPLAY.replace("payload,", "payload::text,", 1)


def _replay_rows(run_id: str, after: int, upto: int) -> list[tuple]:
    """``events_read``'s rows as plain tuples (psycopg's own rows, no Event built per row), with
    ``ts`` None for every type not in ``TIMESTAMPED``; the same decoding otherwise."""
    db = connections[DEFAULT_DB_ALIAS]
    if db.vendor == "postgresql":
        with gc_paused(), server_cursor() as cur:
            cur.adapters.register_loader("json", _OrjsonLoader)
            try:
                cur.execute(_REPLAY, [run_id, after, upto], prepare=True, binary=True)
                return cur.fetchall()
            except orjson.JSONDecodeError:  # a payload only json reads (see payload_loads)
                cur.execute(_PG_REPLAY_TEXT, [run_id, after, upto], binary=True)
                return [(s, t, payload_loads(p), ts, v) for s, t, p, ts, v in cur.fetchall()]
    with gc_paused():
        with db.cursor() as cur:
            cur.execute(_REPLAY, [run_id, after, upto])
            rows = cur.fetchall()
        return [(s, t, payload_loads(p), None if ts is None else _sqlite_ts(ts), v) for s, t, p, ts, v in rows]


def events_replay(*, run_id: str, upto: int | None = None, chunk: int | None = None) -> Iterator[tuple]:
    """What a full replay folds: ``events_stream``'s events from seq 1 (chunk by chunk, upcast),
    each a plain tuple in Event's field order, and with ``ts`` only for the types whose fold rule
    reads it (``runs.fold.TIMESTAMPED``), None for the rest. The fold gives the same state from
    these as from ``events_stream``'s (the snapshot check compares the two ways); building no
    Event, and no timestamp the fold would not read, saves about a fifth of the reading's time.

    The consumer must not use the database connection until the iteration ends, and must read it
    to its end or close it: on PostgreSQL the rows arrive while it folds (``_replay_streamed``), and
    the connection is the stream's until then. ``fold`` is the one consumer, and closes it when it
    raises.
    """
    size = chunk or settings.RECKON_READ_CHUNK
    end = upto if upto is not None else 2**62
    if _default_db().vendor == "postgresql" and _STREAMING:
        yield from _replay_streamed(run_id, end, min(size, _STREAM_ROWS))
        return
    after = 0
    current = CURRENT_SCHEMA_VERSION
    while after < end:
        rows = _replay_rows(run_id, after, min(after + size, end))
        if not rows:
            return
        yield from [row if row[4] == current else event_upcast(Event._make(row), run_id) for row in rows]
        after = rows[-1][0]
        del rows


# A replay on PostgreSQL is one statement per range of _REPLAY_RANGE events, its rows fetched
# _STREAM_ROWS at a time (libpq's chunked rows, version 17 and later): the server reads and sends
# the next rows while this process decodes and folds the last ones, the two cores working at once
# where a fetch of the whole range first and a fold after it take turns: a replay of 4,000 events
# takes about 70% of the time (docs/benchmarks.md). The range bounds how long one statement holds
# its snapshot (well under a second); memory holds one fetch of rows.
_STREAMING = psycopg.pq.version() >= 170000
_STREAM_ROWS = 256
_REPLAY_RANGE = 100_000


class _JsonBytesLoader(Loader):
    """The json column's text as bytes (a json value's binary form is its text), for the caller to
    decode: a payload that orjson refuses then falls back to json (``payload_loads``) row by row,
    where a loader's error would end the stream mid-way."""

    format = Format.BINARY
    load = staticmethod(bytes)


def _replay_streamed(run_id: str, end: int, rows: int) -> Iterator[tuple]:
    loads, current, json_loads, decode_error = orjson.loads, CURRENT_SCHEMA_VERSION, json.loads, orjson.JSONDecodeError
    after = 0
    while after < end:
        upto = min(after + _REPLAY_RANGE, end)
        first, got = after, 0
        with server_cursor() as cur:
            cur.adapters.register_loader("json", _JsonBytesLoader)
            stream = cur.stream(_REPLAY, [run_id, after, upto], binary=True, size=rows)
            try:
                for seq, type_, text, ts, v in stream:
                    try:
                        payload = loads(text)
                    except decode_error:  # a payload only json reads (see payload_loads)
                        payload = json_loads(text)
                    yield (seq, type_, payload, ts, v) if v == current else event_upcast(Event(seq, type_, payload, ts, v), run_id)
                    after = seq
                    got += 1
            finally:
                # Stopped early, by the consumer (a fold that raised) or here (an event no upcaster
                # reads): the range's other rows are read and dropped now. Left paused, the stream
                # would hold the connection's lock for as long as anything (an exception's
                # traceback) keeps it, and the next query would wait for ever; closed, psycopg
                # would cancel the statement, which aborts the caller's transaction. A stream read
                # to its end, or ended by its own error, has nothing left: this reads nothing.
                for _ in stream:
                    pass
        if got < upto - first:  # the log ends in this range
            return


def events_stream(*, run_id: str, after: int = 0, upto: int | None = None, chunk: int | None = None, upcast: bool = True) -> Iterator[Event]:
    """``events_load`` one chunk at a time (``RECKON_READ_CHUNK`` events, each chunk one range scan
    of the (run, seq) key): what a replay, an export or any reader of a whole long log iterates, so
    that memory holds one chunk, never the log. ``upcast=False``: the events as stored
    (``events_read``), for an export.

    Chunks are separate statements: the events of seq ``<= upto`` (default: as far as the log
    reaches when each chunk is read) are immutable once written, so the chunks together are exactly
    one prefix of the log, whatever is appended meanwhile.
    """
    size = chunk or settings.RECKON_READ_CHUNK
    end = upto if upto is not None else 2**62
    while after < end:
        rows = events_read(run_id=run_id, after=after, upto=min(after + size, end))
        if not rows:
            return
        yield from events_upcast(rows, run_id) if upcast else rows
        after = rows[-1].seq
        del rows
