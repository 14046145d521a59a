"""The uncertain-call projection: tool calls whose start has no matching completion.

One function, ``rows_apply``, turns a run's events into changes to its ``UncertainCall`` rows. The
incremental path (``projection_apply``, registered with ``runs.store.projector_register``) calls it
inside every append's transaction with the run's unresolved rows; ``projections_rebuild`` calls it
with every event of every run from an empty table. Because both paths run the same code over the
same events in the same order, the rebuilt table equals the incremental one (a test checks this on
the fixtures and on generated logs). Only ``version`` and ``updated_at`` may differ: they are
concurrency tokens, and a policy change bumps ``version`` without an event.

Pairing mirrors the fold (CONTRACTS section 2): a completion closes the earliest unresolved start
with its call_id, else the earliest with its key. A start that completes while its writer still
owns the run was never uncertain, so its row is deleted rather than kept as resolved; the table
holds only calls that were, or still are, in doubt. A retry that Reckon itself starts carries
``retry_of`` (the original start's seq) and belongs to the original row instead of opening one.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Callable, Iterable

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.utils import timezone as djtz
from psycopg.types.json import Jsonb

from recovery.models import ToolPolicy, UncertainCall
from recovery.policies import Policy, call_terms, policy_from_row, unclassified_policy
from runs.fold import Event, gc_paused
from runs.identity import idempotency_key, signature
from runs.pg import server_cursor
from runs.store import payload_loads
from runs.upcasters import events_upcast

S = UncertainCall.State
RELEVANT = frozenset(
    {
        "tool_call_started",
        "tool_call_completed",
        "tool_call_uncertain",
        "reconciliation_attempted",
        "approval_requested",
        "approval_decided",
        "tool_call_resolved",
        "operator_note",
    }
)


# Attempts counted per outcome on the call's row (the four outcomes of CONTRACTS section 3).
_OUTCOME_COLUMNS = {o: f"outcomes_{o}" for o in ("match", "absent", "conflict", "unavailable")}


def backoff_s(attempts: int) -> float:
    """Delay before attempt ``attempts + 1``: doubling from the base, capped."""
    base = float(getattr(settings, "RECKON_RECOVERY_BACKOFF_S", 10))
    cap = float(getattr(settings, "RECKON_RECOVERY_BACKOFF_MAX_S", 900))
    return min(cap, base * (2 ** max(0, attempts - 1)))


def _aware(ts) -> datetime:
    if isinstance(ts, str):
        ts = datetime.fromisoformat(ts[:-1] + "+00:00" if ts.endswith("Z") else ts)
    if ts is None:
        return djtz.now()
    return ts if ts.tzinfo else ts.replace(tzinfo=timezone.utc)


class Policies:
    """Policies by tool for one apply: looked up once per tool, a missing one is unclassified."""

    def __init__(self, preload: dict[str, Policy] | None = None):
        self._by_tool: dict[str, Policy] = dict(preload or {})
        self._complete = preload is not None

    def get(self, tool: str) -> Policy:
        p = self._by_tool.get(tool)
        if p is None:
            row = None if self._complete else ToolPolicy.objects.filter(tool=tool).first()
            p = policy_from_row(row) if row else unclassified_policy(tool)
            self._by_tool[tool] = p
        return p

    @classmethod
    def all(cls) -> "Policies":
        return cls({r.tool: policy_from_row(r) for r in ToolPolicy.objects.all()})


class RunRows:
    """A run's rows being changed by one apply: what to create, update and delete afterwards."""

    def __init__(self, run_id: str, rows: Iterable[UncertainCall]):
        self.run_id = run_id
        self.rows: list[UncertainCall] = sorted(rows, key=lambda r: r.start_seq)
        self.changed: set[int] = set()  # id() of rows to save
        self.deleted: list[UncertainCall] = []

    def touch(self, row: UncertainCall, seq: int) -> None:
        row.version += 1
        row.last_seq = seq
        self.changed.add(id(row))

    def unresolved(self) -> Iterable[UncertainCall]:
        return (r for r in self.rows if r.state != S.RESOLVED)

    def by_start(self, start_seq) -> UncertainCall | None:
        return next((r for r in self.rows if r.start_seq == start_seq), None)

    def target(self, p: dict) -> UncertainCall | None:
        """The unresolved row an event about a call refers to: by start_seq, call_id, then key."""
        if p.get("start_seq") is not None:
            # An event that names its start refers to that start only, resolved or not.
            return self.by_start(p["start_seq"])
        cid = p.get("call_id")
        if cid is not None:
            row = next((r for r in self.unresolved() if r.call_id == cid), None)
            if row is not None:
                return row
        key = p.get("idempotency_key")
        if key:
            return next((r for r in self.unresolved() if r.idempotency_key == key), None)
        return None


def _foreign_key_flag(rr: RunRows, q: dict, start_key: str, seq: int) -> None:
    """A completion that names another call's key (docs/recovery.md): it completed the start it
    pairs with by call id, and says nothing trustworthy about the call whose key it records. That
    call stays uncertain; its row says why, for the person who settles it."""
    key = q.get("idempotency_key")
    if not key or q.get("is_error") or key == start_key:
        return
    for other in rr.unresolved():
        if other.idempotency_key == key and other.call_id != str(q.get("call_id")):
            other.last_error = (
                f"key mismatch: the completion at seq {seq} pairs with call {q.get('call_id')} (started with key {start_key}) "
                f"by call id but records this call's key {key}; this call is not taken as completed until a person or the receiver settles it"
            )
            rr.touch(other, seq)


def rows_apply(rr: RunRows, events: Iterable[Event], *, epoch_of: Callable[[int], int], policies: Policies, users: Callable[[str], int | None]) -> None:
    """Fold ``events`` (already upcast, in seq order) into the run's rows in ``rr``."""
    events = [ev for ev in events if ev.type in RELEVANT]
    skip_next = False
    for i, ev in enumerate(events):
        if skip_next:
            skip_next = False
            continue
        t = ev.type
        p = ev.payload
        seq = ev.seq
        if t == "tool_call_started" and p.get("retry_of") is None and i + 1 < len(events):
            # The common case, taken without building a row: a start whose very next event is its
            # live completion, paired by call_id with no older open start of that call_id in the
            # way. The row would be created and deleted at once; only its duplicate flags remain.
            nxt = events[i + 1]
            q = nxt.payload
            if (
                nxt.type == "tool_call_completed"
                and q.get("source", "live") == "live"
                and q.get("call_id") == p["call_id"]
                and not any(r.call_id == str(p["call_id"]) for r in rr.unresolved())
            ):
                key = q.get("idempotency_key")
                _foreign_key_flag(rr, q, p.get("idempotency_key") or idempotency_key(rr.run_id, p.get("signature") or signature(p["name"], p["arguments"])), nxt.seq)
                if key and not q.get("is_error"):
                    for other in rr.unresolved():
                        if other.idempotency_key == key and not other.possible_duplicate:
                            other.possible_duplicate = True
                            rr.touch(other, nxt.seq)
                skip_next = True
                continue
        if t == "tool_call_started":
            if p.get("retry_of") is not None:
                row = rr.by_start(p["retry_of"])
                if row is not None and row.state != S.RESOLVED:
                    row.retry_seq = seq
                    if row.state in (S.OPEN, S.IN_FLIGHT):
                        row.state = S.RECONCILING
                    rr.touch(row, seq)
                continue
            started_at = _aware(ev.ts)
            policy = policies.get(p["name"])
            row = UncertainCall(
                run_id=rr.run_id,
                call_id=str(p["call_id"]),
                # A key recorded in the log wins over one computed again (CONTRACTS section 2).
                idempotency_key=p.get("idempotency_key") or idempotency_key(rr.run_id, p.get("signature") or signature(p["name"], p["arguments"])),
                tool=p["name"],
                arguments=p.get("arguments"),
                tenant=str(p.get("tenant") or "default")[:200],
                start_seq=seq,
                started_at=started_at,
                start_epoch=epoch_of(seq),
                state=S.IN_FLIGHT,
                version=0,
                **call_terms(policy, p.get("arguments"), started_at),
            )
            rr.rows.append(row)
            rr.touch(row, seq)
        elif t == "tool_call_completed":
            row = rr.target({"call_id": p.get("call_id"), "idempotency_key": p.get("idempotency_key")})
            key = p.get("idempotency_key")
            if row is not None and row.call_id == str(p.get("call_id")):
                _foreign_key_flag(rr, p, row.idempotency_key, seq)
            if row is not None:
                if row.state == S.IN_FLIGHT and p.get("source", "live") == "live" and row.retry_seq is None:
                    rr.rows.remove(row)
                    rr.changed.discard(id(row))
                    if row.pk is not None:
                        rr.deleted.append(row)
                else:
                    row.state = S.RESOLVED
                    row.disposition = "failed" if p.get("is_error") and not key else "completed"
                    row.resolved_by = f"completion ({p.get('source', 'live')})"
                    row.resolution_kind = {"reconciliation": "automatic", "retry": "automatic", "operator": "person"}.get(p.get("source", "live"), "run")
                    row.resolved_seq = seq
                    row.retry_seq = None
                    row.next_attempt_at = None
                    rr.touch(row, seq)
            if key and not p.get("is_error"):
                # The logical action completed (again): any other start of it still in doubt may
                # have happened too, so the effect may now exist twice.
                for other in rr.unresolved():
                    if other is not row and other.idempotency_key == key and not other.possible_duplicate:
                        other.possible_duplicate = True
                        rr.touch(other, seq)
        elif t == "tool_call_uncertain":
            row = rr.target(p)
            if row is not None and row.state == S.IN_FLIGHT:
                row.state = S.OPEN
                row.uncertain_seq = seq
                row.uncertain_reason = str(p.get("reason", ""))[:200]
                rr.touch(row, seq)
        elif t == "reconciliation_attempted":
            row = rr.target(p)
            if row is None:
                continue
            ts = _aware(ev.ts)
            row.attempts = max(row.attempts, int(p.get("attempt") or 0))
            row.last_outcome = str(p.get("outcome") or "")[:16]
            row.last_rule = str(p.get("rule") or "")[:300]
            row.last_error = str(p.get("error") or "")
            row.last_attempt_at = ts
            if row.last_outcome in _OUTCOME_COLUMNS:
                column = _OUTCOME_COLUMNS[row.last_outcome]
                setattr(row, column, getattr(row, column) + 1)
            evidence = p.get("evidence")
            ms = evidence.get("duration_ms") if isinstance(evidence, dict) else None
            if isinstance(ms, (int, float)) and not isinstance(ms, bool):
                row.last_lookup_ms = float(ms)
            if row.state in (S.OPEN, S.IN_FLIGHT):
                row.state = S.RECONCILING
            # The attempt itself says when to look again (null: nothing left to try automatically).
            delay = p.get("next_attempt_in_s")
            row.next_attempt_at = ts + timedelta(seconds=float(delay)) if delay is not None else None
            rr.touch(row, seq)
        elif t == "approval_requested":
            if not p.get("idempotency_key"):
                continue  # the agent's own approval before a call: not about an uncertain one
            row = rr.target(p)
            if row is None:
                continue
            row.state = S.ESCALATED
            row.approval_pending = True
            if row.escalated_at is None:
                row.escalated_at = _aware(ev.ts)
            row.escalation_reason = str(p.get("reason") or "policy")[:32]
            if row.escalation_reason == "overdue" and row.next_attempt_at is None:
                row.next_attempt_at = _aware(ev.ts)
            if p.get("last_error"):
                row.last_error = str(p["last_error"])
            rr.touch(row, seq)
        elif t == "approval_decided":
            if not p.get("idempotency_key"):
                continue
            row = rr.target(p)
            if row is None:
                continue
            row.approval_pending = False
            rr.touch(row, seq)
        elif t == "tool_call_resolved":
            key = p["idempotency_key"]
            # The completion appended just before (same batch) already closed the named start; the
            # resolution still sets its disposition (retried, compensated...), and closes any other
            # start of the same action left open.
            named = rr.by_start(p.get("start_seq")) if p.get("start_seq") is not None else None
            for row in [r for r in rr.rows if r is named or (r.state != S.RESOLVED and r.idempotency_key == key)]:
                row.state = S.RESOLVED
                row.disposition = p["disposition"]
                row.resolved_by = str(p.get("by") or p.get("rule") or "")[:200]
                row.resolution_kind = "person" if p.get("by") else "automatic"
                row.resolved_seq = seq
                row.retry_seq = None
                row.next_attempt_at = None
                rr.touch(row, seq)
        elif t == "operator_note":
            if not p.get("idempotency_key") and p.get("start_seq") is None:
                continue
            row = rr.by_start(p["start_seq"]) if p.get("start_seq") is not None else rr.target(p)
            if row is None:
                continue
            action = p.get("action", "note")
            if action in ("claim", "assign"):
                name = str(p.get("assignee") or p["by"])
                row.claimed_by_name = name[:150]
                row.claimed_by_id = users(name)
                row.claimed_at = _aware(ev.ts)
            elif action == "release":
                row.claimed_by_name = ""
                row.claimed_by_id = None
                row.claimed_at = None
            else:
                row.notes += 1
            rr.touch(row, seq)


# --- the hot reads and writes, without the ORM's per-query compilation ---------------------------


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
        self._converters: dict[str, list] = {}

    def select(self) -> str:
        qn = connection.ops.quote_name
        return ", ".join(f"{self.alias}.{qn(f.column)}" for f in self.fields)

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
        for i, found, col in self._convs():
            v = values[i]
            for conv in found:
                v = conv(v, col, connection)
            values[i] = v
        obj = self.model.from_db(connection.alias, self.attnames, values)
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


def run_rows_read(run_id: str, named: set) -> list[UncertainCall]:
    """The run's unresolved rows plus the resolved ones whose start seq is in ``named``."""
    sql = f"SELECT {CALL_COLUMNS.select()} FROM reckon_uncertain_call uc WHERE uc.run_id = %s AND (uc.state <> %s"
    params: list = [run_id, S.RESOLVED.value]
    if named:
        if connection.vendor == "postgresql":
            sql += " OR uc.start_seq = ANY(%s)"
            params.append(sorted(named))
        else:
            sql += f" OR uc.start_seq IN ({', '.join(['%s'] * len(named))})"
            params.extend(sorted(named))
    sql += ")"
    return [CALL_COLUMNS.instance(r) for r in rows_fetch(sql, params)]


def row_update(row: UncertainCall) -> None:
    """Write the columns of ``row`` that changed since it was read by ``Columns.instance``."""
    loaded = getattr(row, "_loaded", None)
    if loaded is None or row.pk is None:
        row.save()
        return
    qn = connection.ops.quote_name
    sets, params = [], []
    for f, before in zip(CALL_COLUMNS.fields, loaded):
        value = getattr(row, f.attname)
        if value != before or f.attname == "updated_at":
            sets.append(f"{qn(f.column)} = %s")
            params.append(f.get_db_prep_save(value, connection))
    if not sets:
        return
    params.append(row.pk)
    sql = f"UPDATE reckon_uncertain_call SET {', '.join(sets)} WHERE id = %s"
    if connection.vendor == "postgresql":
        # Server-side binding: the few shapes of this statement (which columns an event changes)
        # are prepared by psycopg once they repeat.
        with server_cursor() as cur:
            cur.execute(sql, params)
    else:
        with connection.cursor() as cur:
            cur.execute(sql, params)
    row._loaded = tuple(getattr(row, a) for a in CALL_COLUMNS.attnames)


def _user_lookup() -> Callable[[str], int | None]:
    cache: dict[str, int | None] = {}
    User = get_user_model()

    def get(name: str) -> int | None:
        if name not in cache:
            cache[name] = User.objects.filter(**{User.USERNAME_FIELD: name}).values_list("pk", flat=True).first()
        return cache[name]

    return get


def _save(rr: RunRows) -> None:
    if rr.deleted:
        UncertainCall.objects.filter(pk__in=[r.pk for r in rr.deleted]).delete()
    now = djtz.now()
    for row in rr.rows:
        if id(row) in rr.changed:
            row.updated_at = now
            row_update(row)


def projection_apply(run_id: str, events: list[Event], epoch: int) -> None:
    """The projector: keep the run's rows in step with an append, inside its transaction.

    ``epoch`` is the epoch the append's fence accepted: the one that wrote these events.
    """
    relevant = [ev for ev in events if ev.type in RELEVANT]
    if not relevant:
        return
    # The run's unresolved rows, plus any resolved row an event names by its start: the same rows a
    # rebuild would have in hand at this point of the log.
    named = {ev.payload.get("start_seq") for ev in relevant} | {ev.payload.get("retry_of") for ev in relevant}
    named.discard(None)
    rr = RunRows(run_id, run_rows_read(run_id, named))

    def epoch_of(seq: int) -> int:
        return epoch

    rows_apply(rr, events_upcast(relevant, run_id), epoch_of=epoch_of, policies=Policies(), users=_user_lookup())
    _save(rr)


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


def projections_rebuild(*, chunk: int = 5000) -> dict:
    """Rebuild every row from the log; returns counts. Runs in one transaction: readers see old or new."""
    types = sorted(RELEVANT)
    placeholders = ", ".join(["%s"] * len(types))
    sql = (
        "SELECT e.run_id, e.seq, e.type, e.v, e.ts, e.payload, e.epoch FROM reckon_event e "
        f"WHERE e.type IN ({placeholders}) ORDER BY e.run_id, e.seq"
    )
    pg = connection.vendor == "postgresql"
    if pg:
        sql = sql.replace("e.payload", "e.payload::text")
    policies = Policies.all()
    users = _user_lookup()
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
        created.extend(rr.rows)
        total_rows += len(rr.rows)

    def fold(batch) -> None:
        nonlocal current, evs, epochs
        for run_id, seq, type_, v, ts, payload, epoch in batch:
            if run_id != current:
                if current is not None:
                    flush_run(current, evs, epochs)
                current, evs, epochs = run_id, [], {}
            if not pg and isinstance(ts, str):
                ts = datetime.fromisoformat(ts)
            evs.append(Event(seq, type_, loads(payload) if isinstance(payload, str) else payload, ts, v))
            epochs[seq] = epoch
        if len(created) >= chunk:
            rows_insert(created)
            created.clear()

    current, evs, epochs = None, [], {}
    with transaction.atomic():
        UncertainCall.objects.all().delete()
        if pg:
            # Binary rows: timestamps arrive as numbers instead of text parsed in Python, which took
            # as long as decoding the payloads. The sort by (run, seq) stays in memory.
            with server_cursor() as cur:
                cur.execute("SET LOCAL work_mem = '64MB'")
                cur.execute(sql, types, binary=True)
                with gc_paused():
                    while batch := cur.fetchmany(chunk):
                        fold(batch)
        else:
            with connection.cursor() as cur:
                cur.execute(sql, types)
                with gc_paused():
                    while batch := cur.fetchmany(chunk):
                        fold(batch)
        if current is not None:
            flush_run(current, evs, epochs)
        if created:
            rows_insert(created)
    return {"rows": total_rows}


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
