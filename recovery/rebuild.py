"""Recomputing the uncertain-call rows and the recorded calls roll-up: from the whole log
(``manage.py rebuild_projections``), or a tool's policy-decided columns after its policy changed.

The rebuild runs the same rule table as the incremental projection (``recovery.projection``) over
the same events in the same order, so the rebuilt table equals the incremental one.
"""

from __future__ import annotations

from datetime import datetime, timezone

from django.db import connection, transaction
from django.utils import timezone as djtz

from recovery.models import UncertainCall
from recovery.policies import call_terms
from recovery.recorded import recorded_rebuild
from recovery.projection import RELEVANT, Policies, RunRows, in_flight_write, plain_in_flight, rows_apply
from recovery.rows import call_ids_allocate, rows_insert, user_lookup
from runs.fold import Event
from runs.models import Run
from runs.pg import server_cursor
from runs.store import payload_loads
from runs.upcasters import events_upcast


def projections_rebuild(*, chunk: int = 5000) -> dict:
    """Rebuild every row (and the recorded calls roll-up, ``recovery.recorded``) from the log;
    returns counts. Runs in one transaction: readers see old or new."""
    types = sorted(RELEVANT)
    placeholders = ", ".join(["%s"] * len(types))
    sql = f"SELECT e.run_id, e.seq, e.type, e.v, e.ts, e.payload, e.epoch FROM reckon_event e WHERE e.type IN ({placeholders}) ORDER BY e.run_id, e.seq"
    pg = connection.vendor == "postgresql"
    if pg:
        sql = sql.replace("e.payload", "e.payload::text")
    policies = Policies.all()
    users = user_lookup()
    loads = payload_loads
    total_rows = 0
    created: list[UncertainCall] = []
    now = djtz.now()

    def flush_run(run_id: str, evs: list[Event], epochs: dict[int, int]) -> None:
        nonlocal total_rows
        rr = RunRows(run_id, [])
        rows_apply(rr, events_upcast(evs, run_id), epoch_of=epochs.__getitem__, policies=policies, users=users)
        for r in rr.rows:
            r.updated_at = now
            # A plain call in flight is kept on its run's row, exactly as the incremental path keeps it.
            (in_flight if plain_in_flight(r) else created).append(r)
        total_rows += len(rr.rows)

    def fold(batch) -> None:
        nonlocal current, evs, epochs
        for run_id, seq, type_, v, ts, payload, epoch in batch:
            if run_id != current:
                if current is not None:
                    flush_run(current, evs, epochs)
                current, evs, epochs = run_id, [], {}
            if not pg:
                # SQLite keeps the column in UTC without an offset; Django's backend hands it back
                # as a naive datetime (or text): read it back aware.
                ts = (datetime.fromisoformat(ts) if isinstance(ts, str) else ts).replace(tzinfo=timezone.utc)
            evs.append(Event(seq, type_, loads(payload) if isinstance(payload, str) else payload, ts, v))
            epochs[seq] = epoch
        if len(created) >= chunk:
            rows_insert(created)
            created.clear()

    current, evs, epochs = None, [], {}
    in_flight: list[UncertainCall] = []
    with transaction.atomic():
        UncertainCall.objects.all().delete()
        Run.objects.filter(in_flight__isnull=False).update(in_flight=None)
        if pg:
            # Binary rows: timestamps arrive as numbers instead of text parsed in Python, which took
            # as long as decoding the payloads. The sort by (run, seq) stays in memory.
            with server_cursor() as cur:
                cur.execute("SET LOCAL work_mem = '64MB'")
                cur.execute(sql, types, binary=True)
                while batch := cur.fetchmany(chunk):
                    fold(batch)
        else:
            with connection.cursor() as cur:
                cur.execute(sql, types)
                while batch := cur.fetchmany(chunk):
                    fold(batch)
        if current is not None:
            flush_run(current, evs, epochs)
        if created:
            rows_insert(created)
        for r, pk in zip(in_flight, call_ids_allocate(n=len(in_flight))):
            r.pk = pk
        by_run: dict[str, list[UncertainCall]] = {}
        for r in in_flight:
            by_run.setdefault(r.run_id, []).append(r)
        for run_id, rows in by_run.items():
            in_flight_write(run_id, rows)
        recorded = recorded_rebuild(chunk=chunk)
    return {"rows": total_rows, "recorded": recorded}


def terms_refresh(*, tool: str) -> int:
    """Recompute the policy-decided columns of the tool's rows after its policy changed."""
    policy = Policies().get(tool)
    n = 0
    for row in UncertainCall.objects.filter(tool=tool):
        terms = call_terms(policy, row.arguments, row.started_at)
        if any(getattr(row, k) != v for k, v in terms.items()):
            for k, v in terms.items():
                setattr(row, k, v)
            row.version += 1
            row.updated_at = djtz.now()
            row.save(update_fields=[*terms, "version", "updated_at"])
            n += 1
    return n
