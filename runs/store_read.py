"""The raw read path the fold is fed from: a run's stored events, decoded and upcast, in seq order
(``events_read``, ``events_load``, ``events_replay``, ``events_stream``). ``runs.store`` re-exports
every name here; callers import them from there."""

from __future__ import annotations

import functools
import json
from datetime import datetime, timezone
from typing import Callable, Iterator

import orjson
import psycopg
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections
from psycopg.adapt import Loader
from psycopg.pq import Format
from psycopg.rows import tuple_row

from runs.events import CURRENT_SCHEMA_VERSION
from runs.fold import TIMESTAMPED, Event
from runs.pg import server_cursor
from runs.upcasters import event_upcast, events_upcast


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
        with server_cursor() as cur:
            cur.adapters.register_loader("json", _OrjsonLoader)
            cur.row_factory = _event_rows
            try:
                cur.execute(_READ, [run_id, after, upto], prepare=True, binary=True)
                return cur.fetchall()
            except orjson.JSONDecodeError:  # a payload only json reads (see payload_loads)
                cur.row_factory = tuple_row
                cur.execute(_PG_READ_TEXT, [run_id, after, upto], binary=True)
                return [Event(s, t, payload_loads(p), ts, v) for s, t, p, ts, v in cur.fetchall()]
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
        with server_cursor() as cur:
            cur.adapters.register_loader("json", _OrjsonLoader)
            try:
                cur.execute(_REPLAY, [run_id, after, upto], prepare=True, binary=True)
                return cur.fetchall()
            except orjson.JSONDecodeError:  # a payload only json reads (see payload_loads)
                cur.execute(_PG_REPLAY_TEXT, [run_id, after, upto], binary=True)
                return [(s, t, payload_loads(p), ts, v) for s, t, p, ts, v in cur.fetchall()]
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
    if connections[DEFAULT_DB_ALIAS].vendor == "postgresql" and _STREAMING:
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
