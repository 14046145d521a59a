"""The one way Reckon reaches PostgreSQL past the ORM, for its hot statements, and the binary
arrays a batch append sends."""

from __future__ import annotations

import struct
import tempfile
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from typing import Callable, Iterator, Sequence

import psycopg
from django.db import DEFAULT_DB_ALIAS, connections, transaction
from psycopg.adapt import Dumper
from psycopg.pq import Format

from runs.events import CURRENT_SCHEMA_VERSION, EventType


def round_trips_count(fn: Callable[[], object]) -> int:
    """How many round trips to PostgreSQL ``fn`` makes on the default connection, from libpq's own
    trace of it: every exchange ends in ReadyForQuery, whoever issued it (the ORM, a psycopg
    cursor, BEGIN or COMMIT). For benchmarks and tests; tracing costs time."""
    db = connections[DEFAULT_DB_ALIAS]
    db.ensure_connection()
    pgconn = db.connection.pgconn
    with tempfile.NamedTemporaryFile("w+", suffix=".trace") as f:
        pgconn.trace(f.fileno())
        pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS | psycopg.pq.Trace.REGRESS_MODE)
        try:
            fn()
        finally:
            pgconn.untrace()
        f.seek(0)
        return sum(1 for line in f if "\tReadyForQuery" in line)


@contextmanager
def server_cursor() -> Iterator[psycopg.Cursor]:
    """A plain psycopg cursor on the default connection, under Django's error mapping.

    It binds server-side: a statement executed with ``prepare=True`` is prepared once per
    connection (settings set psycopg's prepare_threshold, which Django leaves off), and parameters
    or rows travel in binary where the caller asks. The ORM's cursors bind client-side and never
    prepare.
    """
    db = connections[DEFAULT_DB_ALIAS]
    db.ensure_connection()
    with db.wrap_database_errors, psycopg.Cursor(db.connection) as cur:
        yield cur


# A batch's columns travel as PostgreSQL binary arrays, built here with struct: psycopg's own
# list encoder is pure Python, and a text array literal would need every quote in every payload
# escaped and then parsed again by the server. Each class marks bytes that are already one such
# array; the store's cursor registers a dumper (``ARRAY_DUMPERS``) that passes them through with the array's type.
class _TextArray(bytes):
    oid = 1009  # text[]


class _Int2Array(bytes):
    oid = 1005  # smallint[]


class _TimestamptzArray(bytes):
    oid = 1185  # timestamptz[]


class _ByteaArray(bytes):
    oid = 1001  # bytea[]


_I32 = struct.Struct("!i").pack
_INT2_ITEM = struct.Struct("!ih").pack  # length 2, value
_TSTZ_ITEM = struct.Struct("!iq").pack  # length 8, microseconds since 2000-01-01 UTC
_PG_EPOCH = datetime(2000, 1, 1, tzinfo=timezone.utc)
_MICROSECOND = timedelta(microseconds=1)


@contextmanager
def settings_local(**values: str) -> Iterator[None]:
    """PostgreSQL's run-time settings ``values`` (name: value) for the statements run inside, in a
    transaction (or savepoint) of their own, and put back as they were on leaving: ``SET LOCAL``
    alone lasts to the end of the outermost transaction, so a caller already in one (a test, a view
    under ATOMIC_REQUESTS) would run every later statement under them. If the block raises, the
    rollback of its transaction or savepoint undoes them."""
    names = list(values)
    with transaction.atomic(), connections[DEFAULT_DB_ALIAS].cursor() as cur:
        cur.execute("SELECT " + ", ".join(["current_setting(%s)"] * len(names)), names)
        was = cur.fetchone()
        cur.execute("SELECT " + ", ".join(["set_config(%s, %s, true)"] * len(names)), [x for name in names for x in (name, values[name])])
        yield
        cur.execute("SELECT " + ", ".join(["set_config(%s, %s, true)"] * len(names)), [x for pair in zip(names, was) for x in pair])


def _array_header(elem_oid: int, n: int) -> bytes:
    return struct.pack("!iiIii", 1, 0, elem_oid, n, 1)  # one dimension, no nulls, n items from 1


def binary_arrays(events: Sequence, tss: list[datetime], encoded: list[bytes]) -> dict[str, bytes]:
    """A batch's types, versions, times and payload texts as binary arrays (the store's batch append)."""
    n = len(events)
    times = []
    last_ts = last_item = None
    for t in tss:
        if t is not last_ts:  # most events of a batch share the append's clock reading
            aware = t if t.tzinfo is not None else t.replace(tzinfo=timezone.utc)  # naive: UTC, as the session
            last_ts, last_item = t, _TSTZ_ITEM(8, (aware - _PG_EPOCH) // _MICROSECOND)
        times.append(last_item)
    types, vs = _TYPE_ITEMS, _V_ITEMS
    payloads = [_array_header(25, n)]
    for b in encoded:
        payloads += (_I32(len(b)), b)
    return {
        "types": _TextArray(_array_header(25, n) + b"".join([types.get(ev.type) or _type_item(ev.type) for ev in events])),
        "vs": _Int2Array(_array_header(21, n) + b"".join([vs.get(ev.v) or _INT2_ITEM(2, ev.v) for ev in events])),
        "tss": _TimestamptzArray(_array_header(1184, n) + b"".join(times)),
        "payloads": _TextArray(b"".join(payloads)),
    }


def bytea_array(items: list[bytes]) -> bytes:
    """A list of byte strings as one binary bytea[] (a batch's canonical event bytes)."""
    parts = [_array_header(17, len(items))]
    for b in items:
        parts += (_I32(len(b)), b)
    return _ByteaArray(b"".join(parts))


# The length word of each item of a ``hashes_array``: every hash is 32 bytes.
HASH_ITEM_PREFIX = _I32(32)


def hashes_array(n: int, framed: bytes) -> bytes:
    """``n`` 32-byte hashes, each already preceded by ``HASH_ITEM_PREFIX``, as one binary bytea[]."""
    return _ByteaArray(_array_header(17, n) + framed)


def nulls_bytea_array(n: int) -> bytes:
    """``n`` NULLs as one binary bytea[] (the hashes of a batch of a run recorded before the chain)."""
    return _ByteaArray(struct.pack("!iiIii", 1, 1, 17, n, 1) + _I32(-1) * n)


def _type_item(name: str) -> bytes:
    b = name.encode()
    return _I32(len(b)) + b


# Array items of every registered type name and schema version, built once.
_TYPE_ITEMS = {t.value: _type_item(t.value) for t in EventType}
_V_ITEMS = {v: _INT2_ITEM(2, v) for v in range(1, CURRENT_SCHEMA_VERSION + 1)}


class _PassThroughDumper(Dumper):
    format = Format.BINARY

    def dump(self, obj):
        return obj


ARRAY_DUMPERS = {cls: type(f"PassThrough{cls.oid}", (_PassThroughDumper,), {"oid": cls.oid}) for cls in (_TextArray, _Int2Array, _TimestamptzArray, _ByteaArray)}


def copy_text(value: bytes) -> bytes:
    """``value`` as a field of COPY's text format: a backslash, tab, newline or carriage return escaped."""
    if b"\\" in value:
        value = value.replace(b"\\", b"\\\\")
    if b"\t" in value or b"\n" in value or b"\r" in value:
        value = value.replace(b"\t", b"\\t").replace(b"\n", b"\\n").replace(b"\r", b"\\r")
    return value
