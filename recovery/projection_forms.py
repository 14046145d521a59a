"""The uncertain-call projection's database forms (PostgreSQL), generated from its rule table.

The projection's one definition is its rule table (``recovery.projection.HANDLERS``). Two appends
are made cheaper by doing its work inside the append's own statement, each generated from that
definition rather than written beside it:

- The agent's live start and completion (``projection_statement``, a ``runs.store.StatementPart``):
  a start adds the entry ``recovery.rows.in_flight_entry`` writes for the row ``_started`` builds
  (its values from ``start_fields``, three of them given by the statement); a completion removes
  the entry under its call id, on condition that the rule table would do exactly that and nothing
  more.
- A reconciliation's append (``projection_rider``, a ``runs.store.Rider``): the rule table runs in
  Python on a copy of the rows the lease holder read, and the statement writes the columns that
  changed (``recovery.rows.row_changes``), on conditions under which the projection would have read
  exactly those rows.

When a condition fails the statement writes nothing and the projection runs in Python.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from types import SimpleNamespace
from typing import Iterator

from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.utils import timezone as djtz

from recovery import projection
from recovery.models import UncertainCall
from recovery.projection import HANDLERS, RELEVANT, Policies, RunRows, rows_apply, start_fields
from recovery.rows import CALL_COLUMNS, in_flight_entry, row_changes, row_copy
from runs.events import CURRENT_SCHEMA_VERSION, EventType
from runs.fold import Event
from runs.rules import ReadModelRule
from runs.selectors import run_key_secret
from runs.store import Rider, StatementPart
from runs.upcasters import event_upcast

S = UncertainCall.State
_STARTED = EventType.TOOL_CALL_STARTED.value
_COMPLETED = EventType.TOOL_CALL_COMPLETED.value


_CALL_ID_SEQUENCES: dict[str, str] = {}


def _call_id_sequence() -> str:
    """The uncertain-call id sequence as a regclass literal, looked up once per database: written
    into the prepared statement it is resolved when the statement is planned, where
    ``pg_get_serial_sequence`` in the statement searched the catalog on every start."""
    # By the database's name from the connection settings (the same dict the connection holds,
    # renamed in place for a test database): read on every start, and a plain dict lookup, where
    # the connection proxy's attributes go through a context-local lookup each.
    key = str(connections.settings[DEFAULT_DB_ALIAS]["NAME"])
    found = _CALL_ID_SEQUENCES.get(key)
    if found is None:
        with connection.cursor() as cur:
            cur.execute("SELECT quote_literal(pg_get_serial_sequence('reckon_uncertain_call', 'id'))")
            found = _CALL_ID_SEQUENCES[key] = f"{cur.fetchone()[0]}::regclass"
    return found


class _Sql(str):
    """A value of a call in flight that the database gives in the start's statement: SQL, not a parameter."""


class _Field(str):
    """A value of a call in flight that the start gives (``start_fields``): the name of its field,
    passed as a parameter of the statement, cast to ``cast``."""

    cast = "text"

    def isoformat(self) -> "_Field":
        time = _Field(self)
        time.cast = "timestamptz"
        return time


# The start's part of the append statement, by sequence literal: one text (the store assembles and
# prepares the statement once per text), and the fields whose values are its parameters in order.
_START_FORMS: dict[str, tuple[str, tuple[str, ...]]] = {}


def _start_form(sequence: str, fields: dict) -> tuple[str, tuple[str, ...]]:
    """The entry ``in_flight_entry`` writes, generated once from it: run over a row whose values
    are their fields' names (the start's own, ``start_fields``) or SQL (the three only the
    statement knows: the seq the fence gives the event, an id from the full table's sequence, the
    lease's epoch)."""
    found = _START_FORMS.get(sequence)
    if found is None:
        probe = SimpleNamespace(
            **{name: _Field(name) for name in fields}, start_seq=_Sql("reckon_run.last_seq + 1"), pk=_Sql(f"nextval({sequence})"), start_epoch=_Sql("reckon_run.lease_epoch")
        )
        entry = in_flight_entry(probe)
        values = ", ".join(f"'{k}', {v if isinstance(v, _Sql) else f'%b::{v.cast}'}" for k, v in entry.items())
        text = f"in_flight = COALESCE(reckon_run.in_flight, '{{}}'::jsonb) || jsonb_build_object(%b::text, jsonb_build_object({values}))"
        found = _START_FORMS[sequence] = (text, tuple(str(v) for v in entry.values() if not isinstance(v, _Sql)))
    return found


_START_CONDITION = "(reckon_run.in_flight IS NULL OR NOT reckon_run.in_flight ? %b)"
_COMPLETION_SET = "in_flight = NULLIF(reckon_run.in_flight - %b, '{}'::jsonb)"
# The other calls in flight are read only when there are any (an agent's calls usually run one at
# a time): CASE decides the order, where AND would leave it to the planner.
_COMPLETION_CONDITION = (
    "reckon_run.in_flight ? %b\n"
    "       AND NOT EXISTS (SELECT 1 FROM reckon_uncertain_call u WHERE u.run_id = reckon_run.run_id AND u.state <> 'resolved')\n"
    "       AND CASE WHEN reckon_run.in_flight - %b = '{}'::jsonb THEN true\n"
    "                ELSE NOT EXISTS (SELECT 1 FROM jsonb_each(reckon_run.in_flight - %b) o WHERE o.value->>'k' = %b OR o.value->>'c' = %b) END"
)


def projection_statement(run_id: str, event: Event) -> StatementPart | None:
    """``projection_apply`` for the agent's two hot appends, as part of the append's statement
    (``runs.store.StatementPart``); None for anything else, which takes the Python path.

    Both change the run row's calls in flight (``Run.in_flight``, keyed by call id: see
    ``in_flight_write``) in the fence's own UPDATE, where ``reckon_run.in_flight`` is the row as it
    was before the append. A live start (not a retry) whose call id has no start in flight is added
    under its call id, with an id from the full table's sequence. A live completion removes the
    start held under its call id (the earliest start of that call id in flight), on condition that
    the general path would do exactly that and nothing more: the run has no full row in doubt (no
    flag or key mismatch can land on one), and no other start of the run in flight records the key
    the completion names (which would be flagged a possible duplicate) or the same call id (held
    under ``call id#seq``: the general path then moves it to the plain key, so that a start under
    ``call id#seq`` exists only beside one under the plain call id, and a start's condition need
    look at the plain key alone). Otherwise the fence refuses the statement and the append takes
    the general path in a transaction.
    """
    if event.v != CURRENT_SCHEMA_VERSION:
        return None
    p = event.payload
    if event.type == _STARTED:
        if p.get("retry_of") is not None or p.get("call_id") is None:
            return None
        fields = start_fields(run_id, p, event.ts, lambda: run_key_secret(run_id=run_id))
        text, names = _start_form(_call_id_sequence(), fields)
        # Kept under its call id (``recovery.projection.in_flight_write``).
        call_id = fields["call_id"]
        return StatementPart(set=text, set_params=(call_id, *(fields[n] for n in names)), condition=_START_CONDITION, condition_params=(call_id,))
    if event.type == _COMPLETED:
        if p.get("source", "live") != "live" or p.get("call_id") is None:
            return None
        call_id, key = str(p["call_id"]), p.get("idempotency_key") or ""
        return StatementPart(
            set=_COMPLETION_SET,
            set_params=(call_id,),
            condition=_COMPLETION_CONDITION,
            condition_params=(call_id, call_id, call_id, key, call_id),
        )
    return None



@dataclass(frozen=True)
class KnownRows:
    """Rows of a run as its lease holder read them, for ``projection_rider``: ``rows`` (each read
    by ``recovery.rows.Columns.instance``) as they were when the run's last seq was ``last_seq``,
    and the ``epoch`` of that holder's lease. Nothing is claimed about the run's other rows: the
    rider's statement checks that there are none in doubt."""

    run_id: str
    last_seq: int
    epoch: int
    rows: tuple


_known: ContextVar[KnownRows | None] = ContextVar("reckon_projection_known_rows", default=None)


@contextmanager
def rows_known(known: KnownRows | None) -> Iterator[None]:
    """For the appends in the block: ``known`` is what the projection would read for an append to
    its run that follows ``known.last_seq`` directly (``projection_rider``)."""
    token = _known.set(known)
    try:
        yield
    finally:
        _known.reset(token)


# Handlers whose work on a row already read the rider may do (no row created, deleted or moved,
# no user looked up): a reconciliation's attempt, completion, resolution, escalation and the
# answer to a pending one.
_RIDING = frozenset(t.value for t in (EventType.RECONCILIATION_ATTEMPTED, EventType.TOOL_CALL_COMPLETED, EventType.TOOL_CALL_RESOLVED, EventType.APPROVAL_REQUESTED, EventType.APPROVAL_DECIDED))
# Values the rider passes as binary parameters as they are (anything else: the Python path).
_PLAIN_VALUES = (type(None), bool, int, float, str, Decimal, datetime, date)


def projection_rider(run_id: str, events: list[Event]) -> Rider | None:
    """``projection_apply`` for an append by a holder that read the call's row under its lease
    (``rows_known``: the reconciler), as an UPDATE riding in the append's statement: the run's rows
    are neither read again nor written by a statement of their own, two round trips fewer.

    The rows are changed by the same rule table (``rows_apply``) as ever, on a copy of the rows the
    holder read, and the UPDATE writes the columns that changed, exactly as ``row_update`` would,
    on conditions under which the projection's own read, in the append's transaction, would have
    found exactly those rows: the row's ``version`` and ``updated_at`` are still the ones read
    (every write to a row's columns moves them: the projection's own and a policy change's), the
    run has no other call in doubt, and no call in flight. The append's fence guarantees the rest:
    it accepts only the epoch read and ``known.last_seq`` as the last seq, so no event came in
    between. When a condition fails the UPDATE writes nothing, and ``then`` runs the projection in
    Python after all, in the append's transaction as always.

    None (the Python path) for anything else: no rows known for this run and seq, an event whose
    handler may create, delete or move a row, or a row the events name that is not known.
    """
    known = _known.get()
    if known is None or known.run_id != run_id or not events or events[0].seq != known.last_seq + 1:
        return None
    relevant = [ev for ev in events if ev.type in HANDLERS]
    if not relevant or any(ev.type not in _RIDING for ev in relevant):
        return None
    starts = {r.start_seq for r in known.rows}
    if any(ev.payload.get(k) is not None and ev.payload.get(k) not in starts for ev in relevant for k in ("start_seq", "retry_of")):
        return None  # the Python path would also read a resolved row an event names
    if any(getattr(r, "_loaded", None) is None or r.pk is None or r.state in (S.RESOLVED, S.IN_FLIGHT) for r in known.rows):
        return None
    rows = [row_copy(r) for r in known.rows]
    for row in rows:
        row._narrow = False
    rr = RunRows(run_id, rows)

    def refuse(name: str) -> int | None:
        raise _NotRiding

    try:
        rows_apply(rr, relevant, epoch_of=lambda seq: known.epoch, policies=Policies(), users=refuse, upcast=lambda ev: event_upcast(ev, run_id))
    except _NotRiding:
        return None
    changed = [r for r in rr.rows if id(r) in rr.changed]
    if rr.deleted or len(rr.rows) != len(rows) or len(changed) != 1:
        return None
    (row,) = changed
    db = connections[DEFAULT_DB_ALIAS]
    qn = db.ops.quote_name
    row.updated_at = djtz.now()
    sets, params = [], []
    for column, prepared in row_changes(row, db):
        if not isinstance(prepared, _PLAIN_VALUES):
            return None
        sets.append(f"{qn(column)} = %b")
        # A choice (a str subclass) as plain text: the binary dumpers go by exact type.
        params.append(str(prepared) if isinstance(prepared, str) and type(prepared) is not str else prepared)
    loaded = dict(zip(CALL_COLUMNS.attnames, row._loaded))
    cte = (
        f"UPDATE reckon_uncertain_call SET {', '.join(sets)}"
        " WHERE id = %b AND version = %b AND updated_at IS NOT DISTINCT FROM %b AND EXISTS (SELECT 1 FROM ev)"
        " AND NOT EXISTS (SELECT 1 FROM reckon_uncertain_call o WHERE o.run_id = %b AND o.state <> %b AND o.id <> %b)"
        " AND (SELECT r.in_flight FROM reckon_run r WHERE r.run_id = %b) IS NULL"
        " RETURNING 1"
    )
    params += [row.pk, loaded["version"], loaded["updated_at"], run_id, S.RESOLVED.value, row.pk, run_id]

    def then(updated) -> None:
        if updated != 1:
            projection.projection_apply(run_id, events, known.epoch)

    return Rider(cte=cte, cte_params=tuple(params), result="(SELECT count(*) FROM {cte})", result_params=(), then=then)


class _NotRiding(Exception):
    """A handler asked for what the rider does not do (a user looked up): the Python path."""



RULE = ReadModelRule("uncertain calls", RELEVANT, projection.projection_apply, statement=projection_statement, rider=projection_rider)
