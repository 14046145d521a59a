"""The uncertain-call rows' hot reads and writes, in hand-written SQL read back through the ORM's
own converters: the projection and the reconciliation worker run a few of these per call, and
compiling an ORM query of ~45 columns cost more than the database spent answering it."""

from __future__ import annotations

import json
import operator
from datetime import datetime, timezone
from typing import Callable

import orjson
from django.contrib.auth import get_user_model
from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.models.base import ModelState
from psycopg.types.json import Jsonb

from recovery.models import InFlightCall, ToolPolicy, UncertainCall
from runs.fold import Event
from runs.pg import server_cursor
from runs.store import payload_loads, rereads_for

S = UncertainCall.State


class Columns:
    """A model's concrete columns for hand-written SQL, read back through Django's own converters.

    Compiling an ORM query of ~45 columns costs more CPU than the database spends answering it, and
    the projection and the reconciliation worker run a few of them per call. The column list and
    the converters are built once per process and vendor; values still pass through exactly the
    converters the ORM would apply, so instances are the same as ``objects.filter(...)`` returns.
    """

    def __init__(self, model, alias: str):
        self.model = model
        self.alias = alias
        self.fields = list(model._meta.concrete_fields)
        self.attnames = [f.attname for f in self.fields]
        # Every field's value of an instance in one C call (``values_of``).
        self.values_of = operator.attrgetter(*self.attnames)
        self.updated_at = self.attnames.index("updated_at") if "updated_at" in self.attnames else -1
        self._converters: dict[str, list] = {}
        self._selects: dict[str, str] = {}

    def select(self) -> str:
        text = self._selects.get(connection.vendor)
        if text is None:
            qn = connection.ops.quote_name
            text = self._selects[connection.vendor] = ", ".join(f"{self.alias}.{qn(f.column)}" for f in self.fields)
        return text

    def _convs(self) -> list:
        convs = self._converters.get(connection.vendor)
        if convs is None:
            convs = []
            for i, f in enumerate(self.fields):
                col = f.get_col(self.alias)
                found = connection.ops.get_db_converters(col) + col.get_db_converters(connection)
                if found:
                    convs.append((i, found, col))
            self._converters[connection.vendor] = convs
        return convs

    def instance(self, values, start: int = 0):
        """The model instance for the columns at ``values[start:start + len(fields)]``, or None
        when its primary key is null (an outer join that found nothing)."""
        values = list(values[start : start + len(self.fields)])
        if values[0] is None:
            return None
        # The connection itself, not the ``connection`` proxy: each attribute read through the
        # proxy is a context-local lookup, and the converters read a few per value.
        db = connections[DEFAULT_DB_ALIAS]
        for i, found, col in self._convs():
            v = values[i]
            for conv in found:
                v = conv(v, col, db)
            values[i] = v
        obj = self.model.from_db(db.alias, self.attnames, values)
        obj._loaded = tuple(values)  # what ``rows_update`` compares against
        return obj


CALL_COLUMNS = Columns(UncertainCall, "uc")
POLICY_COLUMNS = Columns(ToolPolicy, "tp")


def rows_fetch(sql: str, params: list) -> list:
    if connection.vendor == "postgresql":
        # Server-side binding and a statement prepared once per connection: these run per call.
        with server_cursor() as cur:
            cur.execute(sql, params, prepare=True)
            return cur.fetchall()
    with connection.cursor() as cur:
        cur.execute(sql, params)
        return cur.fetchall()


def run_rows_read(run_id: str, named: set, *, unresolved: bool = True) -> tuple[list[UncertainCall], list[InFlightCall]]:
    """The run's unresolved rows plus the resolved ones whose start seq is in ``named`` (with
    ``unresolved`` false, only the rows whose start seq is in ``named``), and the run's calls in
    flight, in one statement: the run's row joined to its call rows, each result row carrying the
    run row's calls in flight (``Run.in_flight``, as the ``InFlightCall`` view reads them)."""
    # The run row always matches (the projection runs in an append to it), so the outer join gives
    # at least one row, with null call columns when the run has no call row that qualifies.
    sql = f"SELECT r.in_flight, {CALL_COLUMNS.select()} FROM reckon_run r LEFT JOIN reckon_uncertain_call uc ON uc.run_id = r.run_id AND ({'uc.state <> %s' if unresolved else 'false'}"
    params: list = [S.RESOLVED.value] if unresolved else []
    if named:
        if connection.vendor == "postgresql":
            sql += " OR uc.start_seq = ANY(%s)"
            params.append(sorted(named))
        else:
            sql += f" OR uc.start_seq IN ({', '.join(['%s'] * len(named))})"
            params.extend(sorted(named))
    sql += ") WHERE r.run_id = %s"
    params.append(run_id)
    result = rows_fetch(sql, params)
    rows = [row for row in (CALL_COLUMNS.instance(r, 1) for r in result) if row is not None]
    return rows, in_flight_calls(run_id, result[0][0] if result else None)


def in_flight_entry(row: UncertainCall) -> dict:
    """A call in flight as the run row keeps it (``Run.in_flight``, read by the ``InFlightCall`` view)."""
    # The time in the form the view reads back: an offset time on PostgreSQL (cast to timestamptz),
    # and Django's own text form of a datetime on SQLite, so that the view's column compares and
    # converts like any DateTimeField.
    at = row.started_at.isoformat() if connection.vendor == "postgresql" else connection.ops.adapt_datetimefield_value(row.started_at)
    return {"s": row.start_seq, "i": row.pk, "c": row.call_id, "k": row.idempotency_key, "t": row.tool, "n": row.tenant, "a": at, "e": row.start_epoch}


def in_flight_calls(run_id: str, held) -> list[InFlightCall]:
    """The run row's calls in flight (``Run.in_flight`` as read: a JSON object or its text) as the
    ``InFlightCall`` view gives them (recovery migration 0008), one per entry, in no order: each
    entry as ``in_flight_entry`` writes it."""
    if held is None:
        return []
    if isinstance(held, (str, bytes)):
        held = json.loads(held)
    calls = []
    for v in held.values():
        at = datetime.fromisoformat(v["a"])
        calls.append(
            InFlightCall(
                run_id=run_id,
                start_seq=int(v["s"]),
                id=int(v["i"]),
                call_id=v["c"],
                idempotency_key=v["k"],
                tool=v["t"],
                tenant=v["n"],
                started_at=at if at.tzinfo else at.replace(tzinfo=timezone.utc),
                start_epoch=int(v["e"]),
            )
        )
    return calls


# Field types whose ``get_db_prep_save`` returns a value of these exact types unchanged on
# PostgreSQL (``to_python``, ``float()`` or ``bool()`` of the value itself; an aware datetime is
# passed through by the backend's ``adapt_datetimefield_value``), and the integer types, which the
# backend wraps (``adapt_integerfield_value``) after ``int()`` of the value itself: the changed
# columns of a call row are prepared without Django's field machinery for each
# (tests/recovery/test_rows.py holds them equal to what it prepares).
_PASSED_AS_IS = {"CharField": str, "TextField": str, "FloatField": float, "BooleanField": bool, "DateTimeField": datetime}
_INTEGERS = frozenset({"IntegerField", "BigIntegerField", "PositiveIntegerField", "SmallIntegerField", "PositiveSmallIntegerField", "PositiveBigIntegerField"})
_SLOW = object()


def _prepared(field, value, db):
    """``field.get_db_prep_save(value, db)`` on PostgreSQL for the plain cases, else ``_SLOW``."""
    if value is None:
        return None  # every field prepares None as None
    kind = field.get_internal_type()
    t = type(value)
    if kind in _INTEGERS:
        return db.ops.adapt_integerfield_value(value, kind) if t is int else _SLOW
    if _PASSED_AS_IS.get(kind) is not t or (t is datetime and value.tzinfo is None):
        return _SLOW
    return value


def row_changes(row: UncertainCall, db) -> list[tuple[str, object]]:
    """(column, value prepared for the database) of each column of ``row`` that changed since
    ``Columns.instance`` read it, and ``updated_at`` always."""
    values = CALL_COLUMNS.values_of(row)
    postgres = db.vendor == "postgresql"
    changes = []
    for i in [i for i, (now, before) in enumerate(zip(values, row._loaded)) if now != before or i == CALL_COLUMNS.updated_at]:
        f, value = CALL_COLUMNS.fields[i], values[i]
        prepared = _prepared(f, value, db) if postgres else _SLOW
        changes.append((f.column, f.get_db_prep_save(value, db) if prepared is _SLOW else prepared))
    return changes


def row_copy(row: UncertainCall) -> UncertainCall:
    """A copy of ``row`` to change without changing it: its field values (shared, each immutable
    or never changed in place by the projection's handlers) and a fresh model state. ``copy.copy``
    goes through the model's pickling support, which cost more than the handlers themselves."""
    clone = UncertainCall.__new__(UncertainCall)
    clone.__dict__.update(row.__dict__)
    clone._state = ModelState()
    clone._state.db, clone._state.adding = row._state.db, row._state.adding
    return clone


def row_update(row: UncertainCall) -> None:
    """Write the columns of ``row`` that changed since it was read by ``Columns.instance``."""
    loaded = getattr(row, "_loaded", None)
    if loaded is None or row.pk is None:
        row.save()
        return
    db = connections[DEFAULT_DB_ALIAS]  # not the proxy: see ``Columns.instance``
    qn = db.ops.quote_name
    changes = row_changes(row, db)
    if not changes:
        return
    params = [value for _, value in changes]
    params.append(row.pk)
    sql = f"UPDATE reckon_uncertain_call SET {', '.join(f'{qn(column)} = %s' for column, _ in changes)} WHERE id = %s"
    if db.vendor == "postgresql":
        # Server-side binding: the few shapes of this statement (which columns an event changes)
        # are prepared by psycopg once they repeat.
        with server_cursor() as cur:
            cur.execute(sql, params)
    else:
        with connection.cursor() as cur:
            cur.execute(sql, params)
    row._loaded = CALL_COLUMNS.values_of(row)


def user_lookup() -> Callable[[str], int | None]:
    cache: dict[str, int | None] = {}
    User = get_user_model()

    def get(name: str) -> int | None:
        if name not in cache:
            cache[name] = User.objects.filter(**{User.USERNAME_FIELD: name}).values_list("pk", flat=True).first()
        return cache[name]

    return get


def rows_insert(rows: list[UncertainCall]) -> None:
    """Insert new rows in bulk: COPY on PostgreSQL (the ORM's per-value preparation of ~45 columns
    cost more than the rebuild's fold), ``bulk_create`` elsewhere."""
    if connection.vendor != "postgresql":
        UncertainCall.objects.bulk_create(rows, batch_size=1000)
        return
    fields = [f for f in CALL_COLUMNS.fields if not f.primary_key]
    json_fields = {f.attname for f in fields if f.get_internal_type() == "JSONField"}
    names = [f.attname for f in fields]
    qn = connection.ops.quote_name
    sql = f"COPY reckon_uncertain_call ({', '.join(qn(f.column) for f in fields)}) FROM STDIN"
    with server_cursor() as cur, cur.copy(sql) as copy:
        for row in rows:
            values = [getattr(row, n) for n in names]
            if json_fields:
                values = [Jsonb(v) if n in json_fields and v is not None else v for n, v in zip(names, values)]
            copy.write_row(values)


def call_ids_allocate(*, n: int) -> list[int]:
    """``n`` new ids from the uncertain-call table's id sequence, for calls kept in flight in the
    narrow table: the id a call keeps if it is promoted to a full row, so its address never changes.

    PostgreSQL: the identity sequence. SQLite: the AUTOINCREMENT counter in ``sqlite_sequence``,
    moved past the ids taken (SQLite holds its write lock for the whole transaction, and the
    projection always runs in the append's).
    """
    if n <= 0:
        return []
    with connection.cursor() as cur:
        if connection.vendor == "postgresql":
            cur.execute("SELECT nextval(pg_get_serial_sequence('reckon_uncertain_call', 'id')) FROM generate_series(1, %s)", [n])
            return [r[0] for r in cur.fetchall()]
        cur.execute("SELECT seq FROM sqlite_sequence WHERE name = 'reckon_uncertain_call'")
        row = cur.fetchone()
        first = (row[0] if row else 0) + 1
        if row:
            cur.execute("UPDATE sqlite_sequence SET seq = %s WHERE name = 'reckon_uncertain_call'", [first + n - 1])
        else:
            cur.execute("INSERT INTO sqlite_sequence (name, seq) VALUES ('reckon_uncertain_call', %s)", [first + n - 1])
        return list(range(first, first + n))


def events_at(*, run_id: str, seqs: list[int]) -> list[Event]:
    """The run's stored events at ``seqs`` (as stored, not upcast), in seq order.

    Inside an import (``runs.store.rereads_kept``) the events read are kept, as text so that no
    caller's change to a payload can reach the next one, and only seqs not kept are read; what is
    kept is then just the events asked for this time (the calls still in flight)."""
    if not seqs:
        return []
    kept = rereads_for(run_id)
    wanted = seqs if kept is None else [s for s in seqs if s not in kept]
    out = _events_read_at(run_id, wanted) if wanted else []
    if kept is None:
        return out
    for ev in out:
        try:
            kept[ev.seq] = (ev.type, orjson.dumps(ev.payload), ev.ts, ev.v)
        except TypeError:  # a value orjson does not write (an integer beyond 64 bits): read again next time
            pass
    found = {ev.seq: ev for ev in out}
    asked = set(seqs)
    for seq in [s for s in kept if s not in asked]:
        del kept[seq]
    for seq in asked.difference(found).intersection(kept):
        type_, text, ts, v = kept[seq]
        found[seq] = Event(seq, type_, orjson.loads(text), ts, v)
    return [found[s] for s in sorted(found)]


def _events_read_at(run_id: str, seqs: list[int]) -> list[Event]:
    marks = ", ".join(["%s"] * len(seqs))
    with connection.cursor() as cur:
        cur.execute(f"SELECT seq, type, payload, ts, v FROM reckon_event WHERE run_id = %s AND seq IN ({marks}) ORDER BY seq", [run_id, *seqs])
        rows = cur.fetchall()
    out = []
    for seq, type_, payload, ts, v in rows:
        if isinstance(payload, (str, bytes)):
            payload = payload_loads(payload)
        if isinstance(ts, str):
            ts = datetime.fromisoformat(ts)
        if ts.tzinfo is None:
            ts = ts.replace(tzinfo=timezone.utc)
        out.append(Event(seq, type_, payload, ts, v))
    return out
