"""The PostgreSQL executor of the append (``runs.store.events_append``): one statement that checks
the fence, moves the run's head, inserts the events and carries the read models' SQL. It is the
one place outside migrations where PostgreSQL's event table is written, for an agent's single
event, a batch and an import's chunk alike.

The statement, for one event or a batch::

    WITH fence AS (UPDATE reckon_run SET last_seq = new, head = new head, ...
                    WHERE run_id = r AND lease_epoch = e AND last_seq = expected
                      AND head IS NOT DISTINCT FROM the head the links start from ...
                   RETURNING run_id),
         ev AS (INSERT INTO reckon_event ... SELECT ... FROM fence [, unnest(...)] RETURNING ...)
         [, p0 AS (a read model's statement part), r0 AS (a rider)]
    SELECT (SELECT count(*) FROM ev) [, the riders' results]

The chain is linked here, in the appending process, by ``runs.verify``'s own link: the database
computes no hash. The links start from the run's head, which this process either remembers from
its own last append to the run (``_heads``) or reads. The fence compares that head with the row's
(compare and set, on the row it locks anyway), so a remembered head made stale by a rolled-back
transaction, another process or a rebuilt database writes nothing: the head is read again and the
append linked again from it, once. A wrong link can never be written.

Every statement goes through one psycopg cursor per connection, server-side bound and prepared
once per connection (``prepare=True``; settings set psycopg's ``prepare_threshold``), its batch
columns as binary arrays (runs.pg).
"""

from __future__ import annotations

import functools

import psycopg
from django.db import transaction

from runs.pg import ARRAY_DUMPERS, HASH_ITEM_PREFIX, binary_arrays, hashes_array, nulls_bytea_array
from runs.store_check import room_for
from runs.verify import chain_links, genesis

# (database alias, run id) -> (last seq, head) after this process's last append to the run. Only a
# hint, checked by the fence: see the module's docstring. Entries are immutable tuples replaced
# whole, so a thread never sees one run's seq with another's head.
_heads: dict[tuple[str, str], tuple[int, bytes | None]] = {}
_HEADS_MAX = 4096


def head_remember(alias: str, run_id: str, last_seq: int, head: bytes | None) -> None:
    if len(_heads) >= _HEADS_MAX:
        _heads.clear()
    _heads[(alias, run_id)] = (last_seq, head)


def head_read(db, run_id: str) -> tuple[int | None, bytes | None]:
    """The run's stored last seq and head (None, None for an unknown run)."""
    cur = append_cursor(db)
    with db.wrap_database_errors:
        cur.execute("SELECT last_seq, head FROM reckon_run WHERE run_id = %b", [run_id], prepare=True)
        row = cur.fetchone()
    if row is None:
        return None, None
    return row[0], (bytes(row[1]) if row[1] is not None else None)


def _head_for(db, run_id: str, expected_seq: int) -> bytes | None:
    known = _heads.get((db.alias, run_id))
    if known is not None and known[0] == expected_seq:
        return known[1]
    return head_read(db, run_id)[1]


def links_from(run_id: str, expected_seq: int, stored_head: bytes | None, canons: list[bytes]) -> list[bytes] | None:
    """The events' hashes after the run's stored head; from the genesis at seq 0. None for a run
    recorded before the chain (a NULL head after seq 0): its appends stay unchained until
    ``manage.py chain_backfill`` chains it."""
    start = stored_head if stored_head is not None else (genesis(run_id) if expected_seq == 0 else None)
    return chain_links(start, canons) if start is not None else None


def append(db, run_id: str, epoch: int, expected_seq: int, batch, projectors, parts, riders, apply_rules) -> bool:
    """Write ``batch`` (runs.store_check.Batch) behind the fence; False when the fence refused.

    ``parts``: the projectors' statement parts when every projector of this single event has one
    (then the append is one statement in autocommit), else None. ``riders``: projector -> Rider
    for the statement of an append that is a transaction. ``apply_rules(results)``: the seals and
    the Python projectors, called inside the append's transaction with the riders' results."""
    stored = _head_for(db, run_id, expected_seq)
    for _ in range(2):
        hashes = links_from(run_id, expected_seq, stored, batch.canons)
        if _attempt(db, run_id, epoch, expected_seq, batch, stored, hashes, projectors, parts, riders, apply_rules):
            head_remember(db.alias, run_id, batch.last_seq, hashes[-1] if hashes else None)
            return True
        _heads.pop((db.alias, run_id), None)
        last_seq, now_head = head_read(db, run_id)
        if last_seq != expected_seq or now_head == stored:
            return False  # the fence refused for a reason of its own: the caller diagnoses it
        stored = now_head  # only the head this process remembered was stale: link again from the stored one
    return False


def _attempt(db, run_id, epoch, expected_seq, batch, stored, hashes, projectors, parts, riders, apply_rules) -> bool:
    n = len(batch.appended)
    if parts is not None:
        # One event whose read models all have a statement form: one statement in autocommit. A
        # false condition (or the fence) writes nothing; the general way below then decides.
        if _run(db, run_id, epoch, expected_seq, batch, stored, hashes, parts, {})[0] == 1:
            return True
    if not projectors and not batch.seals:
        # One statement in autocommit (or in the caller's transaction): no BEGIN/COMMIT round trips.
        return _run(db, run_id, epoch, expected_seq, batch, stored, hashes, (), {})[0] == n
    # No savepoint inside a caller's transaction: a refused fence returns normally (nothing was
    # written), and any error here must undo the caller's whole transaction anyway, since its read
    # models would no longer match the log.
    with transaction.atomic(savepoint=False):
        row = _run(db, run_id, epoch, expected_seq, batch, stored, hashes, (), riders)
        if row[0] != n:
            return False
        apply_rules(dict(zip(riders, row[1:])))
    return True


def _run(db, run_id, epoch, expected_seq, batch, stored, hashes, parts, riders) -> tuple:
    """The append's one statement, executed: (rows inserted, each rider's result...)."""
    n, finishing = len(batch.appended), batch.finished_seq is not None
    sql = _statement(n == 1, finishing, batch.needs_open_run, tuple((p.set, p.condition, p.cte) for p in parts), tuple((r.cte, r.result) for r in riders.values()))
    params: list = [batch.last_seq, hashes[-1] if hashes else None, batch.nbytes]
    if finishing:
        params.append(batch.finished_seq)
    for p in parts:
        params.extend(p.set_params)
    params += [run_id, epoch, expected_seq, stored, room_for(batch.nbytes)]
    for p in parts:
        params.extend(p.condition_params)
    if n == 1:
        ev = batch.appended[0]
        params += [ev.seq, ev.type, ev.v, batch.tss[0], batch.encoded[0].decode(), epoch, hashes[0] if hashes else None]
    else:
        arrays = binary_arrays(batch.appended, batch.tss, batch.encoded)
        params += [expected_seq, epoch, arrays["types"], arrays["vs"], arrays["tss"], arrays["payloads"], _hashes_array(n, hashes)]
    for p in parts:
        params.extend(p.cte_params)
    for r in riders.values():
        params.extend(r.cte_params)
    for r in riders.values():
        params.extend(r.result_params)
    cur = append_cursor(db)
    with db.wrap_database_errors:  # Django's exception types, as from any other query
        try:
            cur.execute(sql, params, prepare=True)
        except psycopg.errors.InvalidSqlStatementName:
            # The server dropped the connection's prepared statements behind psycopg's back. Inside
            # a transaction the error has aborted it and is raised; in autocommit psycopg is told
            # (a DEALLOCATE ALL it sees makes it forget its own) and the statement is prepared again.
            if not db.get_autocommit():
                raise
            cur.execute("DEALLOCATE ALL")
            cur.execute(sql, params, prepare=True)
        return cur.fetchone()


_FENCE = """
WITH fence AS (
    UPDATE reckon_run
       SET last_seq = %b, head = %b, payload_bytes = payload_bytes + %b{finish_set}{sets}
     WHERE run_id = %b
       AND lease_epoch = %b
       AND lease_holder <> ''
       AND last_seq = %b
       AND head IS NOT DISTINCT FROM %b
       AND payload_bytes <= %b{finish_where}{conditions}
 RETURNING run_id
), ev AS (
    INSERT INTO reckon_event (run_id, seq, type, v, ts, payload, epoch, hash)
{rows}
 RETURNING run_id, seq, epoch
)"""
_ONE = "    SELECT fence.run_id, %b, %b, %b, %b, %b::json, %b, %b FROM fence"
# A batch travels as binary arrays (types, versions, times, payload texts, hashes; runs.pg), seqs
# are the ordinality. Each payload is parsed once, by the json column's input.
_MANY = """    SELECT fence.run_id, %b + e.n, e.t, e.v, e.ts, e.p::json, %b, e.h
      FROM fence
     CROSS JOIN unnest(%b::text[], %b::smallint[], %b::timestamptz[], %b::text[], %b::bytea[]) WITH ORDINALITY AS e(t, v, ts, p, h, n)"""


# Bounded: a text depends only on the shape (one event or a batch, terminal or not, the parts' and
# riders' texts), never on values.
@functools.lru_cache(maxsize=256)
def _statement(one: bool, finishing: bool, open_only: bool, parts: tuple, riders: tuple) -> str:
    """The append's statement. Parameters in order: the SET's (last seq, head, bytes, the
    terminal seq when finishing, the parts' sets'), the fence's (run, epoch, expected seq, the
    previous head, room, the parts' conditions'), the rows', the parts' ctes', the riders' ctes',
    the riders' results'. ``open_only``: the run must not have finished (a second end, or the
    agent's own work: ``Batch.needs_open_run``)."""
    sql = [
        _FENCE.format(
            finish_set=",\n           finished_seq = COALESCE(finished_seq, %b)" if finishing else "",
            sets="".join(f",\n           {s}" for s, _, _ in parts if s),
            finish_where="\n       AND finished_seq IS NULL" if open_only else "",
            conditions="".join(f"\n       AND {c}" for _, c, _ in parts if c),
            rows=_ONE if one else _MANY,
        )
    ]
    sql += [f", p{i} AS (\n{cte}\n)" for i, (_, _, cte) in enumerate(parts) if cte]
    sql += [f", r{i} AS (\n{cte}\n)" for i, (cte, _) in enumerate(riders)]
    sql.append("\nSELECT (SELECT count(*) FROM ev)" + "".join(", " + result.format(cte=f"r{i}") for i, (_, result) in enumerate(riders)))
    return "".join(sql)


def _hashes_array(n: int, hashes: list[bytes] | None) -> bytes:
    if hashes is None:  # an unchained run's batch
        return nulls_bytea_array(n)
    return hashes_array(n, b"".join([HASH_ITEM_PREFIX + h for h in hashes]))


def append_cursor(db) -> psycopg.Cursor:
    """The psycopg cursor the append path uses on ``db``'s current connection.

    A plain psycopg cursor (server-side binding, so the statement is prepared once per connection
    and the arrays travel in binary, with no per-element escaping), kept for as long as the
    connection lives: building one per call cost about a tenth of a single append. A Django
    connection belongs to one thread, and so does this cursor.
    """
    db.ensure_connection()
    raw = db.connection
    cur = db.__dict__.get("_reckon_append_cursor")
    if cur is None or cur.connection is not raw or cur.closed:
        cur = psycopg.Cursor(raw)
        for cls, dumper in ARRAY_DUMPERS.items():
            cur.adapters.register_dumper(cls, dumper)
        db.__dict__["_reckon_append_cursor"] = cur
    return cur
