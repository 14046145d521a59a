"""The SQLite executor of the append (``runs.store.events_append``).

Inside an IMMEDIATE transaction (settings open every SQLite transaction so): the write lock is held
from BEGIN, so the head read here is the one the fence moves, and the fence and the inserts cannot
interleave with another writer. The chain is linked here by ``runs.verify``'s own link, as on
PostgreSQL."""

from __future__ import annotations

from datetime import datetime, timezone

from django.db import connection, transaction

from runs.store_check import room_for
from runs.store_pg import links_from

_HEAD = "SELECT head FROM reckon_run WHERE run_id = %s"
_FENCE = """
UPDATE reckon_run
   SET last_seq = %s, finished_seq = COALESCE(finished_seq, %s), head = %s, payload_bytes = payload_bytes + %s
 WHERE run_id = %s AND lease_epoch = %s AND lease_holder <> '' AND last_seq = %s AND payload_bytes <= %s
   AND (NOT %s OR finished_seq IS NULL)
"""
_INSERT = "INSERT INTO reckon_event (run_id, seq, type, v, ts, payload, epoch, recorded_at, hash) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"


def _sqlite_datetime(value: datetime) -> str:
    """Django's SQLite text for a datetime (``adapt_datetimefield_value`` with the connection in
    UTC: naive in UTC, then ``str``) without its per-value checks, which cost a few microseconds an
    event on an import; anything but a time in UTC goes through Django's own."""
    if value.tzinfo is timezone.utc:
        return value.replace(tzinfo=None).isoformat(" ")
    return connection.ops.adapt_datetimefield_value(value)


def append(run_id: str, epoch: int, expected_seq: int, batch, now: datetime, apply_rules) -> bool:
    """Write ``batch`` (runs.store_check.Batch) behind the fence, then ``apply_rules({})`` in the
    same transaction; False when the fence refused."""
    with transaction.atomic(savepoint=False), connection.cursor() as cur:
        cur.execute(_HEAD, [run_id])
        row = cur.fetchone()
        stored = bytes(row[0]) if row is not None and row[0] is not None else None
        hashes = links_from(run_id, expected_seq, stored, batch.canons) or [None] * len(batch.canons)
        cur.execute(_FENCE, [batch.last_seq, batch.finished_seq, hashes[-1], batch.nbytes, run_id, epoch, expected_seq, room_for(batch.nbytes), batch.needs_open_run])
        if cur.rowcount != 1:
            return False
        adapt = _sqlite_datetime if connection.timezone_name == "UTC" else connection.ops.adapt_datetimefield_value
        rec = adapt(now)
        rows = [(run_id, ev.seq, ev.type, ev.v, adapt(t), p.decode(), epoch, rec, h) for ev, t, p, h in zip(batch.appended, batch.tss, batch.encoded, hashes)]
        cur.executemany(_INSERT, rows)
        apply_rules({})
    return True
