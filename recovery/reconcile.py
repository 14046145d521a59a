"""Reconciliation: one attempt per uncertain call by the rules of docs/recovery.md, alone or in a group of
calls that share a durable commit, and the pass that runs them.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.models import Q
from django.utils import timezone as djtz

from recovery import adapters
from recovery.adapters import AdapterError, Evidence
from recovery.calls import approval_close_events, call_about, call_ref, call_row, completion_event, escalation_event, resolved_event
from recovery.detection import uncertain_calls_detect
from recovery.errors import CallNotFound
from recovery.models import UncertainCall
from recovery.ownership import GROUP_SIZE, AttemptResult, Group, Owner, attempt_fenced, busy_error, holder_name, lease_take
from recovery.policies import Action, Policy, policy_from_row, rule_choose, unclassified_policy
from recovery.projection import backoff_s
from recovery.rows import CALL_COLUMNS, POLICY_COLUMNS, rows_fetch
from recovery.selectors import policy_for
from runs.errors import FenceError, LeaseHeld
from runs.faults import fault_point
from reckon_client.identity import signature
from runs.leases import LAZY_COMMIT, LEASE_RESULT, Lease, lease_acquire_ctes, lease_outcome
from runs.store import NewEvent

log = logging.getLogger("reckon.recovery")
S = UncertainCall.State


def _due(row: UncertainCall) -> str | None:
    """Why the row is not reconcilable now, or None."""
    if row.state in (S.OPEN, S.RECONCILING):
        return None
    if row.state == S.ESCALATED and row.escalation_reason == "overdue":
        return None  # a person is told, and evidence may still settle it first
    return f"state {row.state}" + (f" ({row.escalation_reason})" if row.escalation_reason else "")

def _attempt(
    row: UncertainCall, n: int, ev: Evidence | None, action: Action, *, next_in: float | None, phase: str = "lookup", error: str = "", lookup_ms: float | None = None
) -> NewEvent:
    evidence = ev.as_dict() if ev is not None else {"note": "the tool has no lookup hook"}
    if lookup_ms is not None:
        # Kept in the log with the evidence it timed, so the read model (and /metrics) can be
        # rebuilt from events like every other figure.
        evidence["duration_ms"] = lookup_ms
    return NewEvent(
        "reconciliation_attempted",
        {
            **call_about(row),
            "attempt": n,
            "phase": phase,
            "outcome": ev.outcome if ev is not None else "unavailable",
            "evidence": evidence,
            "error": error or (ev.error if ev is not None else ""),
            "rule": action.rule,
            "action": action.kind,
            "next_attempt_in_s": next_in,
            "by": holder_name(),
        },
    )

def call_row_sql() -> str:
    """The call, its run's last seq and its tool's policy, in one statement."""
    sql = _CALL_SQL.get(connection.vendor)
    if sql is None:
        sql = _CALL_SQL[connection.vendor] = (
            f"SELECT {CALL_COLUMNS.select()}, r.last_seq, {POLICY_COLUMNS.select()}"
            " FROM reckon_uncertain_call uc"
            " LEFT JOIN reckon_run r ON r.run_id = uc.run_id"
            " LEFT JOIN reckon_tool_policy tp ON tp.tool = uc.tool"
            " WHERE uc.id = %s"
        )
    return sql

_CALL_SQL: dict = {}

def _call_read(pk: int) -> tuple[UncertainCall, int | None, Policy]:
    """The call (CallNotFound if none), the last seq of its run when it was read, and its policy."""
    rows = rows_fetch(call_row_sql(), [pk])
    if not rows:
        raise CallNotFound(pk)
    values = rows[0]
    n = len(CALL_COLUMNS.fields)
    row = CALL_COLUMNS.instance(values)
    return row, values[n], _policy_of(values, n + 1, row.tool)

# Policies by the exact values of their row as read (id and updated_at among them): a worker reads
# the same few policies with every call, and converting the row's JSON columns and building the
# policy cost more than reading them. Equal values build an equal policy, so a hit is exact.
_POLICIES: dict[tuple, Policy] = {}

def _policy_of(values, start: int, tool: str) -> Policy:
    raw = tuple(values[start : start + len(POLICY_COLUMNS.fields)])
    if raw[0] is None:  # no policy row: the tool is unclassified
        return unclassified_policy(tool)
    try:
        found = _POLICIES.get(raw)
    except TypeError:  # a column read as an unhashable value (JSON decoded by another loader)
        return policy_from_row(POLICY_COLUMNS.instance(values, start))
    if found is None:
        found = policy_from_row(POLICY_COLUMNS.instance(values, start))
        if len(_POLICIES) >= 256:
            _POLICIES.clear()
        _POLICIES[raw] = found
    return found

def _not_now(row: UncertainCall, attempt: int | None) -> str | None:
    """Why this attempt should not run now, or None."""
    why = _due(row)
    if why:
        return why
    if attempt is not None and row.attempts >= attempt:
        return f"attempt {attempt} already recorded"
    return None

# ``_not_now`` in SQL, over the call row ``uc`` read with the lease (``_call_leasing_sql``): the lease
# is tried only for a call the attempt would act on, so a redelivered task or a call settled
# meanwhile costs no lease and leaves no lease records, as when the lease followed the read.
_DUE_SQL = (
    f"(uc.state IN ('{S.OPEN.value}', '{S.RECONCILING.value}') OR (uc.state = '{S.ESCALATED.value}' AND uc.escalation_reason = 'overdue'))"
    " AND (%(attempt)s::bigint IS NULL OR uc.attempts < %(attempt)s::bigint)"
)

def _call_leasing_sql(lazily: bool) -> str:
    """``call_row_sql`` and the run's lease in one statement (PostgreSQL): the call, its run's last seq
    as the read saw it, its policy, and the outcome of the lease tried on its run (``runs.leases``'
    own acquisition, writing its record) when the call is due and its run is not one whose lease a
    call waiting in the group holds (``%(held)s``)."""
    key = ("leasing", lazily)
    sql = _CALL_SQL.get(key)
    if sql is None:
        sql = _CALL_SQL[key] = (
            f"WITH c AS (SELECT {CALL_COLUMNS.select()}, r.last_seq AS read_at_seq, {POLICY_COLUMNS.select()},"
            f" r.run_id IS NOT NULL AND NOT (uc.run_id = ANY(%(held)s::text[])) AND {_DUE_SQL} AS due"
            " FROM reckon_uncertain_call uc"
            " LEFT JOIN reckon_run r ON r.run_id = uc.run_id"
            " LEFT JOIN reckon_tool_policy tp ON tp.tool = uc.tool"
            " WHERE uc.id = %(pk)s),\n"
            + lease_acquire_ctes(run="(SELECT c.run_id FROM c)", when="(SELECT c.due FROM c)")
            + f"\nSELECT c.*, prev.run_id IS NOT NULL, {LEASE_RESULT}{', ' + LAZY_COMMIT if lazily else ''}"
            " FROM c LEFT JOIN prev ON true LEFT JOIN upd ON true"
        )
    return sql

def _call_read_leasing(pk: int, attempt: int | None, held: list[str]) -> tuple[UncertainCall, int | None, Policy, Lease | LeaseHeld | None]:
    """``_call_read`` with the lease tried in the same statement (one round trip instead of two):
    also the lease taken, the refusal (LeaseHeld, already recorded), or None when the lease was not
    tried (the call is not due, or its run is held by the group or missing)."""
    holder = holder_name()
    params = {"pk": pk, "attempt": attempt, "held": held, "holder": holder, "ttl": float(settings.RECKON_RECOVERY_LEASE_SECONDS)}
    # Lazily only when the statement is a transaction of its own (see runs.leases.lease_acquire).
    # The connection itself, not the proxy, and its flag as ``get_autocommit`` reads it once
    # connected (that method's checks cost a tenth of the read's own Python time).
    db = connections[DEFAULT_DB_ALIAS]
    if db.connection is None:
        db.ensure_connection()
    rows = rows_fetch(_call_leasing_sql(db.autocommit), params)
    if not rows:
        raise CallNotFound(pk)
    values = rows[0]
    n, m = len(CALL_COLUMNS.fields), len(POLICY_COLUMNS.fields)
    row = CALL_COLUMNS.instance(values)
    policy = _policy_of(values, n + 1, row.tool)
    lease: Lease | LeaseHeld | None = None
    if values[n + m + 2]:  # tried: the call was due and its run's row was locked
        try:
            lease = lease_outcome(row.run_id, holder, values[n + m + 3 : n + m + 9])
        except LeaseHeld as exc:  # recorded by lease_outcome
            lease = exc
    return row, values[n], policy, lease

def _pk(pk) -> int:
    if isinstance(pk, bool):
        raise CallNotFound(pk)
    try:
        return int(pk)
    except (TypeError, ValueError):
        raise CallNotFound(pk) from None

def call_reconcile(*, pk: int, attempt: int | None = None) -> AttemptResult:
    """One reconciliation attempt for one uncertain call, by the rules of docs/recovery.md.

    ``attempt`` is the attempt number a task was enqueued for: a redelivered task whose attempt was
    already recorded does nothing, so a task acknowledged late never writes twice. Adapter errors
    and broken policies are recorded as an unavailable attempt with backoff, never raised.
    """
    return _call_attempt(pk, attempt, None)

def calls_reconcile(items: list, *, group_size: int | None = None) -> list[AttemptResult | Exception]:
    """One attempt for each ``(pk, attempt)``, their final appends committed together.

    Each call is still its own attempt: its own lease, its own fenced append with its own
    projection update; only the durable commit is shared, by up to ``group_size`` calls whose work
    is done (see ``Group``). A call that raises, or whose append is refused, affects no other: the
    result list holds the exception (logged) in its place, and the call is due again later.
    """
    group = Group(group_size or GROUP_SIZE)
    results: list[AttemptResult | Exception] = []
    for pk, attempt in items:
        try:
            results.append(_call_attempt(pk, attempt, group))
        except Exception as exc:  # this call's problem, not the batch's
            log.exception("reconciliation of call %s failed", pk)
            results.append(exc)
        if group.due():
            group.commit()
    group.commit()
    return results

def _call_attempt(pk, attempt: int | None, group: Group | None) -> AttemptResult:
    """One attempt; with ``group``, its final append and release are left to the group's commit.

    The call is read together with its run's last seq and the run's lease is taken: on PostgreSQL
    in one statement (``_call_read_leasing``), elsewhere by a statement of its own after the read;
    never inside a transaction (each commits on its own, the lease without waiting for its WAL
    flush, see ``lease_take``). Under the lease nothing else can append to the run, and every event
    that changes the row moves the run's last seq in the same transaction, so when the lease
    reports the seq read with the row, the row is what a read under the lease would return;
    otherwise the call is read again under the lease. In the one statement the read sees the
    statement's snapshot while the lease locks the run row as last committed (waiting for a writer
    that holds it), so the comparison tells the same.
    """
    pk = _pk(pk)
    taken: Lease | LeaseHeld | None = None
    if connection.vendor == "postgresql":
        row, read_at_seq, policy, taken = _call_read_leasing(pk, attempt, group.run_ids() if group is not None else [])
    else:
        row, read_at_seq, policy = _call_read(pk)
    if group is not None and group.holds(row.run_id):
        # An earlier call of this run waits in the group: its events change what this call sees,
        # so they are committed first and this call is read again. (Its lease was not tried.)
        group.commit()
        return _call_attempt(pk, attempt, group)
    why = _not_now(row, attempt)
    if why:
        if isinstance(taken, Lease):  # only if the SQL and Python ever disagreed on what is due
            Owner(row.run_id, taken).release()
        return AttemptResult(row.pk, "skipped", detail=why)
    try:
        if isinstance(taken, LeaseHeld):
            raise taken
        # Not tried by the statement (SQLite, a missing run, or SQL and Python disagreeing): taken
        # here, as before, which raises what it raises for it.
        lease = taken if taken is not None else lease_take(row.run_id)
    except LeaseHeld as exc:  # the refusal is in the lease records already (its own commit)
        return AttemptResult(row.pk, "busy", detail=str(busy_error(row.run_id, exc)))
    owner = Owner(row.run_id, lease)
    try:
        if lease.last_seq != read_at_seq:
            row = call_row(row.pk)  # the run moved between the read and the lease: fresh, under the lease
            why = _not_now(row, attempt)
            if why:
                owner.release()
                return AttemptResult(row.pk, "skipped", detail=why)
        else:
            owner.rows_read([row])
        result = reconcile_owned(owner, row, policy)
    except FenceError as exc:  # a flush before a remote effect was refused
        owner.release()
        return attempt_fenced(AttemptResult(row.pk, "fenced"), exc)
    except BaseException:
        owner.release()
        raise
    if group is not None:
        group.add(owner, result)
        return result
    try:
        owner.finish()
    except FenceError as exc:
        owner.release()
        return attempt_fenced(result, exc)
    except BaseException:
        owner.release()  # the append failed: nothing of ours was written
        raise
    fault_point("after_append")
    return result

def _lookup(row: UncertainCall, policy: Policy) -> tuple[Evidence | None, str, float | None]:
    """Ask the tool's authoritative lookup what happened: (evidence, error, milliseconds taken).

    No lookup hook (or an unclassified tool): no evidence. An adapter that raises, or a broken
    policy, is this call's problem, not the pass's: recorded as unavailable evidence with the error.
    """
    if policy.lookup is None or policy.unclassified:
        return None, "", None
    error = ""
    evidence: Evidence | None = None
    t0 = time.perf_counter()
    try:
        evidence = adapters.lookup(call_ref(row), policy.lookup, policy.semantic_fields)
    except AdapterError as exc:
        error = f"broken policy for {row.tool}: {exc}"
    except Exception as exc:
        error = f"lookup adapter raised {type(exc).__name__}: {exc}"
    # Timed whatever the answer: a lookup that times out is exactly the slow one to see.
    lookup_ms = round((time.perf_counter() - t0) * 1000, 3)
    if error:
        evidence = Evidence("unavailable", error=error)
    return evidence, error, lookup_ms


def reconcile_owned(owner: Owner, row: UncertainCall, policy: Policy | None = None) -> AttemptResult:
    n = row.attempts + 1
    if policy is None:
        policy = policy_for(row.tool)
    now = djtz.now()
    # Only a call left unsettled by this attempt (backoff) carries the overdue escalation: any other
    # action either settles it now or asks a person for its own reason.
    pre: list[NewEvent] = []
    if row.is_overdue(now) and row.risk_class == "irreversible" and not row.approval_pending and not row.escalated_at:
        # Past its deadline an irreversible call goes to a person at once; reconciliation keeps
        # trying, and evidence may still settle it before anyone answers.
        pre.append(escalation_event(row, reason="overdue", question=f"{row.tool} call {row.call_id} is past its recovery deadline with no disposition: did it happen?"))
    evidence, error, lookup_ms = _lookup(row, policy)
    fault_point("after_lookup")
    retry_open = row.retry_window_closes_at is None or row.retry_window_closes_at > now
    action = rule_choose(policy=policy, outcome=evidence.outcome if evidence else None, risk_class=row.risk_class, retry_window_open=retry_open)
    if error:
        action = Action("backoff", "adapter error: the call is marked and looked up again with backoff")
    result = AttemptResult(row.pk, "acted", action=action.kind, outcome=evidence.outcome if evidence else "none", rule=action.rule)
    k = action.kind

    def write(events: list[NewEvent]) -> None:
        owner.append(events)
        result.events.extend(e.type for e in events)

    if k == "complete":
        write(
            [
                _attempt(row, n, evidence, action, lookup_ms=lookup_ms, next_in=None),
                completion_event(row, content=evidence.observed, source="reconciliation", extra={"evidence_seq_attempt": n}),
                *approval_close_events(row, decision="happened", reason=action.rule),
                resolved_event(row, "completed", rule=action.rule),
            ]
        )
    elif k == "backoff":
        write([*pre, _attempt(row, n, evidence, action, lookup_ms=lookup_ms, next_in=backoff_s(n), error=error)])
    elif k == "pause_escalate":
        write(
            [
                _attempt(row, n, evidence, action, lookup_ms=lookup_ms, next_in=None),
                NewEvent("run_paused", {**call_about(row), "reason": f"conflicting effect for {row.tool} call {row.call_id}"}),
                escalation_event(
                    row,
                    reason="conflict",
                    question=f"{row.tool} call {row.call_id}: the receiver holds an operation with the same key but different fields. Which is right?",
                    evidence=evidence.as_dict() if evidence else None,
                ),
            ]
        )
    elif k == "escalate":
        # A person must decide: the escalation names this reason (not "overdue"), so automatic
        # attempts stop until someone answers.
        events = [_attempt(row, n, evidence, action, lookup_ms=lookup_ms, next_in=None)]
        if not (row.approval_pending and row.escalation_reason == (action.reason or "policy")):
            events.append(
                escalation_event(
                    row,
                    reason=action.reason or "policy",
                    question=f"{row.tool} call {row.call_id} may or may not have happened ({action.rule}). Decide what to record.",
                    evidence=evidence.as_dict() if evidence else None,
                )
            )
        write(events)
    elif k == "not_happened":
        write([_attempt(row, n, evidence, action, lookup_ms=lookup_ms, next_in=None), *approval_close_events(row, decision="not_happened", reason=action.rule), resolved_event(row, "not_happened", rule=action.rule)])
    elif k == "retry":
        write([_attempt(row, n, evidence, action, lookup_ms=lookup_ms, next_in=backoff_s(n))])
        retry_owned(owner, row, policy, n, write=write, rule=action.rule, by=None, extra_before=[])
    elif k == "compensate":
        write([_attempt(row, n, evidence, action, lookup_ms=lookup_ms, next_in=None)])
        compensate_owned(owner, row, policy, n, write=write, rule=action.rule, by=None)
    log.info("reconciliation attempt", extra={"pk": row.pk, "attempt": n, "action": k, "rule": action.rule})
    return result

def retry_owned(owner: Owner, row: UncertainCall, policy: Policy, n: int, *, write, rule: str, by: str | None, extra_before: list[NewEvent]) -> str:
    """Retry with the same key through the execute hook; record the retry's start and its result."""
    start = NewEvent(
        "tool_call_started",
        {
            "call_id": row.call_id,
            "name": row.tool,
            "arguments": row.arguments,
            "idempotency_key": row.idempotency_key,
            "signature": signature(row.tool, row.arguments),
            "retry_of": row.start_seq,
            "source": "retry",
        },
    )
    # The retry's start is durable before the request leaves, exactly as a live call's would be.
    write([*extra_before, start])
    owner.flush()
    try:
        done = adapters.execute(call_ref(row), policy.execute)
    except Exception as exc:
        done = adapters.Execution("uncertain", error=f"execute adapter raised {type(exc).__name__}: {exc}")
    fault_point("after_execute")
    if done.outcome == "done":
        write([completion_event(row, content=done.result, source="retry"), *(approval_close_events(row, decision="retry_same_key", reason=rule) if by is None else []), resolved_event(row, "retried", rule=None if by else rule, by=by)])
    elif done.outcome == "failed":
        # The receiver refused it outright: a proven failure, nothing happened, the key stays free.
        write([completion_event(row, content=done.result or done.error, source="retry", is_error=True), *(approval_close_events(row, decision="not_happened", reason=done.error) if by is None else []), resolved_event(row, "not_happened", rule=None if by else f"{rule}; {done.error}", by=by)])
    else:
        write(
            [
                NewEvent(
                    "reconciliation_attempted",
                    {
                        **call_about(row),
                        "attempt": n,
                        "phase": "retry",
                        "outcome": "unavailable",
                        "evidence": done.as_dict(),
                        "error": done.error,
                        "rule": "the retry's outcome is unknown; look it up again before anything else",
                        "action": "backoff",
                        "next_attempt_in_s": backoff_s(n),
                        "by": by or holder_name(),
                    },
                )
            ]
        )
    return done.outcome

def compensate_owned(owner: Owner, row: UncertainCall, policy: Policy, n: int, *, write, rule: str, by: str | None) -> str:
    owner.flush()  # the attempt (or decision) that chose compensation is durable before the inverse runs
    try:
        done = adapters.compensate(call_ref(row), policy.compensate)
    except Exception as exc:
        done = adapters.Execution("uncertain", error=f"compensate adapter raised {type(exc).__name__}: {exc}")
    if done.outcome == "done":
        write([resolved_event(row, "compensated", rule=None if by else rule, by=by)])
    else:
        events = [
            NewEvent(
                "reconciliation_attempted",
                {
                    **call_about(row),
                    "attempt": n,
                    "phase": "compensate",
                    "outcome": "unavailable",
                    "evidence": done.as_dict(),
                    "error": done.error or f"compensation {done.outcome}",
                    "rule": "compensation did not complete: ask a person",
                    "action": "escalate",
                    "next_attempt_in_s": None,
                    "by": by or holder_name(),
                },
            )
        ]
        if not row.approval_pending and by is None:
            events.append(escalation_event(row, reason="compensation", question=f"compensating {row.tool} call {row.call_id} failed: {done.error}", last_error=done.error))
        write(events)
    return done.outcome

def reconcile_pass(*, due_only: bool = True, limit: int | None = None) -> dict:
    """Detect, then one attempt for every reconcilable uncertain call (only due ones by default).

    One call's failure never stops the others: each attempt is isolated and anything unexpected is
    logged and counted, and the call is tried again on a later pass.
    """
    detected = uncertain_calls_detect()
    qs = due_calls(due_only=due_only)
    if limit:
        qs = qs[:limit]
    summary: dict[str, Any] = {"detected": detected["marked"], "acted": 0, "skipped": 0, "busy": 0, "fenced": 0, "errors": 0, "actions": {}}
    pks = list(qs.values_list("pk", flat=True))
    for pk, r in zip(pks, calls_reconcile([(pk, None) for pk in pks])):
        if isinstance(r, Exception) or r.status == "error":
            summary["errors"] += 1
            detail = f"{type(r).__name__}: {r}" if isinstance(r, Exception) else r.detail
            summary.setdefault("error_detail", []).append(f"call {pk}: {detail}")
            continue
        summary[r.status] = summary.get(r.status, 0) + 1
        if r.status == "acted":
            summary["actions"][r.action] = summary["actions"].get(r.action, 0) + 1
    return summary

def due_calls(*, due_only: bool = True):
    """Calls a reconciliation pass would attempt, oldest first."""
    now = djtz.now()
    qs = UncertainCall.objects.filter(Q(state__in=[S.OPEN, S.RECONCILING]) | Q(state=S.ESCALATED, escalation_reason="overdue"))
    if due_only:
        qs = qs.filter(Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=now))
    return qs.order_by("started_at", "id")
