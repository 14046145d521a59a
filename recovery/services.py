"""Writes of the recovery engine: detection, reconciliation, decisions, claims, notes, policies.

Every write that touches a run's history goes through ``_Owner``: it takes the run's lease with a
new epoch, appends with that epoch and releases it. Two recovery workers, or a worker and a resuming
agent, therefore never both act on a run: the second cannot take a live lease (``LeaseHeld``), and
one whose lease expired while it was paused (a GC pause, a slow lookup) is rejected by the store's
fence when it tries to append (``StaleEpoch``), so it stops without writing. Whatever it did
remotely in the meantime carried the call's idempotency key, so the receiver holds at most one
effect and the next worker finds it by lookup.

Ordering inside an attempt follows the agent's own discipline: a retry's start is durable before
the request leaves, and its completion is appended only after the receiver answered. A crash between
the two leaves a start without a completion, which the next attempt settles by looking up again.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.utils import timezone as djtz

from recovery import adapters
from recovery.adapters import AdapterError, CallRef, Evidence
from recovery.models import PolicyChange, ToolPolicy, UncertainCall
from recovery.policies import Action, Policy, PolicyError, policies_parse, policy_from_row, policy_parse, rule_choose, unclassified_policy
from recovery.projection import CALL_COLUMNS, POLICY_COLUMNS, rows_fetch, backoff_s, projection_apply, projections_rebuild, terms_refresh  # noqa: F401 (re-exported)
from recovery.selectors import policy_for
from runs.errors import FenceError, LeaseHeld, RunNotFound, StaleEpoch
from runs.fold import format_ts
from runs.identity import signature
from runs.leases import Lease, db_now, lease_acquire, lease_release
from runs.models import Run
from runs.store import NewEvent, events_append

log = logging.getLogger("reckon.recovery")
S = UncertainCall.State
DECISIONS = ("happened", "retry_same_key", "not_happened", "compensate", "escalate")
AUTOMATIC = "reckon-recovery"



class RecoveryError(Exception):
    """Base of the recovery engine's refusals; the message is fit for an operator."""


class CallNotFound(RecoveryError):
    def __init__(self, pk):
        super().__init__(f"uncertain call {pk!r} does not exist")


class StaleDecision(RecoveryError):
    """The call changed since the person looked at it: nothing was written."""

    def __init__(self, *, pk, seen_version, version, state):
        self.pk, self.seen_version, self.version, self.state = pk, seen_version, version, state
        super().__init__(
            f"uncertain call {pk} changed since you saw it (you saw version {seen_version}, it is now version {version}, "
            f"state {state}); reload it and decide again"
        )


class InvalidDecision(RecoveryError):
    pass


class RunBusy(RecoveryError):
    """Another owner (the agent, another worker) holds the run's lease right now."""


def holder_name() -> str:
    # Computed per call, not at import: a forked Celery worker has its own pid.
    return f"reckon-recovery:{socket.gethostname()}:{os.getpid()}"


def _pause(point: str) -> None:
    """Crash-injection hook for tests: with RECKON_RECOVERY_PAUSE_AT=<point>, stop here.

    The process writes ``RECKON_RECOVERY_PAUSE_FILE`` and waits (so a test can SIGKILL it at exactly
    this point), continuing only if the file ``<that>.go`` appears. Unset, this costs one dict lookup.
    """
    if os.environ.get("RECKON_RECOVERY_PAUSE_AT") != point:
        return
    marker = os.environ.get("RECKON_RECOVERY_PAUSE_FILE", "/tmp/reckon-recovery-paused")
    with open(marker, "w") as f:
        f.write(f"{os.getpid()} {point}\n")
    while not os.path.exists(marker + ".go"):
        time.sleep(0.02)


def _name(who) -> str:
    if who is None:
        raise RecoveryError("a person must be named")
    if isinstance(who, str):
        name = who.strip()
    else:
        name = who.get_username()
    if not name:
        raise RecoveryError("a person must be named")
    return name[:150]


def _commit_lazily() -> None:
    """Let this transaction commit without waiting for its WAL flush (PostgreSQL only).

    Used for lease bookkeeping only, never for history. It is safe because WAL is one sequence: the
    append that follows under this lease commits synchronously, and flushing its commit record
    flushes everything before it, this lease change included. If the server crashed before that, the
    lost lease was never used to write history, and the retry start that precedes any remote effect
    is itself such a synchronous append. It halves the fsyncs per reconciled call.
    """
    if connection.vendor == "postgresql":
        with connection.cursor() as cur:
            cur.execute("SET LOCAL synchronous_commit TO OFF")


def _lease_take(run_id: str) -> Lease:
    return lease_acquire(run_id=run_id, holder=holder_name(), ttl_seconds=settings.RECKON_RECOVERY_LEASE_SECONDS, create=False)


def _busy(run_id: str, exc: LeaseHeld) -> RunBusy:
    return RunBusy(f"run {run_id!r} is owned by {exc.holder!r} right now; try again when its lease ends")


class _Owner:
    """The run's lease for the duration of one recovery write; appends carry its epoch.

    Appends are buffered and written by ``flush``: explicitly before any remote effect (a retry's
    start must be durable before the request leaves), and otherwise together with the lease's
    release in one transaction when the work is done.
    """

    def __init__(self, run_id: str, lease: Lease | None = None):
        self.run_id = run_id
        self.pending: list[NewEvent] = []
        if lease is None:
            held = None
            with transaction.atomic():
                _commit_lazily()
                try:
                    lease = _lease_take(run_id)
                except LeaseHeld as exc:
                    held = exc  # raised after the commit, so the refusal stays in the lease records
            if held is not None:
                raise held
        self.lease = lease
        self.epoch = self.lease.epoch
        self.seq = self.lease.last_seq

    def append(self, events: list[NewEvent]) -> None:
        self.pending.extend(events)

    def flush(self) -> None:
        if self.pending:
            appended = events_append(run_id=self.run_id, epoch=self.epoch, expected_seq=self.seq, events=self.pending)
            self.seq = appended[-1].seq
            self.pending = []

    def finish(self) -> None:
        """Write what is pending and give the lease up, in one transaction."""
        fenced = None
        with transaction.atomic():
            try:
                self.flush()
            except FenceError as exc:
                fenced = exc  # raised after the commit, so the store's record of the rejection stays
            else:
                lease_release(run_id=self.run_id, epoch=self.epoch)
        if fenced is not None:
            raise fenced

    def release(self) -> None:
        self.pending = []
        try:
            with transaction.atomic():
                _commit_lazily()
                lease_release(run_id=self.run_id, epoch=self.epoch)
        except (StaleEpoch, RunNotFound):
            pass  # someone took the run over after our lease expired: it is theirs now


@contextmanager
def _owning(run_id: str, lease: Lease | None = None):
    """Own the run for the block: its lease (taken here, or ``lease`` already taken by the caller),
    the block's appends written with the release in one transaction, or the lease given back."""
    try:
        owner = _Owner(run_id, lease)
    except LeaseHeld as exc:
        raise _busy(run_id, exc) from None
    try:
        yield owner
    except BaseException:
        owner.release()
        raise
    try:
        owner.finish()
    except BaseException:
        owner.release()  # the append was refused (fenced) or failed: nothing of ours was written
        raise


def _row(pk) -> UncertainCall:
    try:
        return UncertainCall.objects.get(pk=pk)
    except (UncertainCall.DoesNotExist, ValueError, TypeError):
        raise CallNotFound(pk) from None


def _ref(row: UncertainCall) -> CallRef:
    return CallRef(row.run_id, row.call_id, row.idempotency_key, row.tool, row.arguments, row.start_seq)


def _about(row: UncertainCall) -> dict:
    return {"call_id": row.call_id, "idempotency_key": row.idempotency_key, "start_seq": row.start_seq}


def _escalation(row: UncertainCall, *, reason: str, question: str, evidence: dict | None = None, last_error: str = "") -> NewEvent:
    # What a person needs to decide without guessing (seed 5.6): the intended payload, when it
    # started, its key, and the last transport error. "Try again?" would hide that "again" may be "twice".
    return NewEvent(
        "approval_requested",
        {
            **_about(row),
            "question": question,
            "reason": reason,
            "tool": row.tool,
            "arguments": row.arguments,
            "started_at": format_ts(row.started_at),
            "last_error": last_error or row.last_error,
            "evidence": evidence,
        },
    )


def _completion(row: UncertainCall, *, content: Any, source: str, is_error: bool = False, extra: dict | None = None) -> NewEvent:
    return NewEvent(
        "tool_call_completed",
        {
            "call_id": row.call_id,
            "name": row.tool,
            "content": content,
            "is_error": is_error,
            # A proven failure occupies no key (the seed's asymmetry): it may be attempted again.
            "idempotency_key": None if is_error else row.idempotency_key,
            "signature": signature(row.tool, row.arguments),
            "source": source,
            "start_seq": row.start_seq,
            **(extra or {}),
        },
    )


def _resolved(row: UncertainCall, disposition: str, *, rule: str | None = None, by: str | None = None) -> NewEvent:
    payload = {**_about(row), "disposition": disposition}
    if by:
        payload["by"] = by
    if rule:
        payload["rule"] = rule
    return NewEvent("tool_call_resolved", payload)


def _close_approval(row: UncertainCall, *, decision: str, reason: str) -> list[NewEvent]:
    """An automatic resolution answers a pending escalation, so the run does not wait for nobody."""
    if not row.approval_pending:
        return []
    return [
        NewEvent(
            "approval_decided",
            {**_about(row), "approved": decision != "not_happened", "by": AUTOMATIC, "reason": reason, "decision": decision},
        )
    ]


# --- detection --------------------------------------------------------------------------------


def _uncertain_reason(run: dict, row: UncertainCall, now) -> str | None:
    if run["lease_epoch"] > row.start_epoch:
        return f"a later epoch ({run['lease_epoch']}) holds the run; the start was written by epoch {row.start_epoch}"
    if not run["lease_holder"]:
        if run["origin"] == Run.Origin.IMPORT:
            return "imported from a file with no live owner"
        return f"epoch {row.start_epoch} released the run without completing the call"
    if run["lease_expires_at"] is not None and run["lease_expires_at"] <= now:
        return f"the lease of epoch {row.start_epoch} expired at {format_ts(run['lease_expires_at'])}"
    return None


def uncertain_calls_detect(*, run_id: str | None = None) -> dict:
    """Turn in-flight starts whose writer is gone into uncertain calls, appending tool_call_uncertain.

    A start is in flight while the lease of the epoch that wrote it is live. Once that lease expired,
    or a later epoch holds the run, or the run was imported with no live owner, nobody will complete
    it: the event is appended under the run's own lease. A run whose new owner is live right now is
    left for the next scan (or for that owner, which sees the same unmatched start).
    """
    qs = UncertainCall.objects.filter(state=S.IN_FLIGHT)
    if run_id is not None:
        qs = qs.filter(run_id=run_id)
    run_ids = sorted(set(qs.values_list("run_id", flat=True)))
    marked, busy = 0, []
    for rid in run_ids:
        now = db_now()
        run = Run.objects.filter(run_id=rid).values("lease_epoch", "lease_holder", "lease_expires_at", "origin").first()
        if run is None:
            continue
        rows = list(UncertainCall.objects.filter(run_id=rid, state=S.IN_FLIGHT).order_by("start_seq"))
        if not any(_uncertain_reason(run, r, now) for r in rows):
            continue
        try:
            with _owning(rid) as owner:
                # Under the lease nothing else can append: re-read, then decide once.
                rows = list(UncertainCall.objects.filter(run_id=rid, state=S.IN_FLIGHT).order_by("start_seq"))
                events = []
                for r in rows:
                    reason = _uncertain_reason(run, r, now)
                    if reason:
                        events.append(NewEvent("tool_call_uncertain", {**_about(r), "reason": reason, "tool": r.tool, "epoch": r.start_epoch}))
                if events:
                    owner.append(events)
                    marked += len(events)
        except RunBusy:
            busy.append(rid)
        except FenceError as exc:
            log.warning("detection fenced", extra={"run_id": rid, "reason": str(exc)})
    return {"marked": marked, "busy": busy}


# --- reconciliation ---------------------------------------------------------------------------


@dataclass
class AttemptResult:
    pk: int
    status: str  # acted | skipped | busy | fenced
    action: str = ""
    outcome: str = ""
    rule: str = ""
    detail: str = ""
    events: list[str] = field(default_factory=list)


def _due(row: UncertainCall) -> str | None:
    """Why the row is not reconcilable now, or None."""
    if row.state in (S.OPEN, S.RECONCILING):
        return None
    if row.state == S.ESCALATED and row.escalation_reason == "overdue":
        return None  # a person is told, and evidence may still settle it first
    return f"state {row.state}" + (f" ({row.escalation_reason})" if row.escalation_reason else "")


def _overdue(row: UncertainCall, now) -> bool:
    return row.deadline is not None and row.deadline < now and row.state != S.RESOLVED


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
            **_about(row),
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


def _call_sql(lazily: bool) -> str:
    """The call, its run's last seq and its tool's policy, in one statement.

    On PostgreSQL ``lazily`` also makes the surrounding transaction commit without waiting for its
    WAL flush (``_commit_lazily``, for the lease bookkeeping that follows) in the same round trip.
    """
    key = (connection.vendor, lazily)
    sql = _CALL_SQL.get(key)
    if sql is None:
        lazy = ", set_config('synchronous_commit', 'off', true)" if lazily and connection.vendor == "postgresql" else ""
        sql = _CALL_SQL[key] = (
            f"SELECT {CALL_COLUMNS.select()}, r.last_seq, {POLICY_COLUMNS.select()}{lazy}"
            " FROM reckon_uncertain_call uc"
            " LEFT JOIN reckon_run r ON r.run_id = uc.run_id"
            " LEFT JOIN reckon_tool_policy tp ON tp.tool = uc.tool"
            " WHERE uc.id = %s"
        )
    return sql


_CALL_SQL: dict[tuple[str, bool], str] = {}


def _call_read(pk, *, lazily: bool = False) -> tuple[UncertainCall, int | None, Policy]:
    """The call (CallNotFound if none), the last seq of its run when it was read, and its policy."""
    if isinstance(pk, bool):
        raise CallNotFound(pk)
    try:
        pk = int(pk)
    except (TypeError, ValueError):
        raise CallNotFound(pk) from None
    rows = rows_fetch(_call_sql(lazily), [pk])
    if not rows:
        raise CallNotFound(pk)
    values = rows[0]
    n = len(CALL_COLUMNS.fields)
    row = CALL_COLUMNS.instance(values)
    tp = POLICY_COLUMNS.instance(values, n + 1)
    return row, values[n], policy_from_row(tp) if tp is not None else unclassified_policy(row.tool)


def _not_now(row: UncertainCall, attempt: int | None) -> str | None:
    """Why this attempt should not run now, or None."""
    why = _due(row)
    if why:
        return why
    if attempt is not None and row.attempts >= attempt:
        return f"attempt {attempt} already recorded"
    return None


def call_reconcile(*, pk: int, attempt: int | None = None) -> AttemptResult:
    """One reconciliation attempt for one uncertain call, by the seed's table (5.6).

    ``attempt`` is the attempt number a task was enqueued for: a redelivered task whose attempt was
    already recorded does nothing, so a task acknowledged late never writes twice. Adapter errors
    and broken policies are recorded as an unavailable attempt with backoff, never raised.
    """
    return _call_attempt(pk, attempt, None)


def calls_reconcile(items: list, *, group_size: int | None = None) -> list[AttemptResult | Exception]:
    """One attempt for each ``(pk, attempt)``, their final appends committed together.

    Each call is still its own attempt: its own lease, its own fenced append with its own
    projection update; only the durable commit is shared, by up to ``group_size`` calls whose work
    is done (see ``_Group``). A call that raises, or whose append is refused, affects no other: the
    result list holds the exception (logged) in its place, and the call is due again later.
    """
    group = _Group(group_size or GROUP_SIZE)
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


# At most this many finished calls share one commit, and none waits for it longer than this: the
# lease (60 s by default) of a call waiting in the group keeps its run from everyone else.
GROUP_SIZE = 20
GROUP_HOLD_S = 0.5


class _Group:
    """Calls whose work is done, waiting to append and release their leases in one transaction.

    A reconciled call costs one durable commit, about as much as the rest of its database work
    together. Calls of different runs share nothing but that commit: each append is fenced by its
    own run's epoch and updates its own projection rows inside the shared transaction, and each
    lease is released in it. A refused append (the lease was lost) writes nothing for that call and
    does not stop the others; any other error rolls the group back, and each call is then finished
    in its own transaction, as without grouping. Until the commit, every call's lease is held, so
    nothing else writes its run: the group commits when it is full, when its oldest finished call
    has waited ``GROUP_HOLD_S``, and before a second call of a run already in it
    is read, since that call must see the first one's events.
    """

    def __init__(self, size: int):
        self.size = max(1, int(size))
        self.hold_s = GROUP_HOLD_S
        self.members: list[tuple[_Owner, AttemptResult]] = []
        self.since = 0.0

    def holds(self, run_id: str) -> bool:
        return any(o.run_id == run_id for o, _ in self.members)

    def add(self, owner: _Owner, result: AttemptResult) -> None:
        if not self.members:
            self.since = time.monotonic()
        self.members.append((owner, result))

    def due(self) -> bool:
        return bool(self.members) and (len(self.members) >= self.size or time.monotonic() - self.since >= self.hold_s)

    def commit(self) -> None:
        members, self.members = self.members, []
        if not members:
            return
        saved = [(o.pending[:], o.seq) for o, _ in members]
        fenced = []
        try:
            with transaction.atomic():
                for o, r in members:
                    try:
                        o.flush()
                    except FenceError as exc:  # nothing of this call was written; the rest go on
                        fenced.append((o, r, exc))
                    else:
                        lease_release(run_id=o.run_id, epoch=o.epoch)
        except Exception:
            log.warning("group commit of %d calls failed; finishing each on its own", len(members), exc_info=True)
            for (o, r), (pending, seq) in zip(members, saved):
                o.pending, o.seq = pending, seq
                _finish(o, r)
            return
        for o, r, exc in fenced:
            o.release()
            _fenced(r, exc)
        _pause("after_append")


def _fenced(result: AttemptResult, exc: FenceError) -> AttemptResult:
    # Our lease ended while we worked: a newer owner decides. Nothing of ours was written.
    log.warning("reconciliation fenced", extra={"pk": result.pk, "reason": str(exc)})
    result.status, result.detail, result.events = "fenced", str(exc), []
    return result


def _finish(owner: _Owner, result: AttemptResult) -> AttemptResult:
    """Append what the call left pending and release its lease, in one transaction of its own."""
    try:
        owner.finish()
    except FenceError as exc:
        owner.release()
        return _fenced(result, exc)
    except Exception as exc:
        owner.release()  # nothing of ours was written
        log.exception("reconciliation of call %s failed", result.pk)
        result.status, result.detail, result.events = "error", f"{type(exc).__name__}: {exc}", []
    return result


def _call_attempt(pk, attempt: int | None, group: _Group | None) -> AttemptResult:
    """One attempt; with ``group``, its final append and release are left to the group's commit.

    The call is read once, in the lease's own transaction just before the lease is taken, together
    with its run's last seq. Under the lease nothing else can append to the run, and every event
    that changes the row moves the run's last seq in the same transaction, so when the lease reports
    the seq read with the row, the row is what a read under the lease would return; otherwise the
    call is read again under the lease.
    """
    held = None
    with transaction.atomic():
        row, read_at_seq, policy = _call_read(pk, lazily=True)
        if group is not None and group.holds(row.run_id):
            # An earlier call of this run waits in the group: its events change what this call
            # sees, so they are committed first and this call is read again.
            transaction.set_rollback(True)
        else:
            why = _not_now(row, attempt)
            if why:
                return AttemptResult(row.pk, "skipped", detail=why)
            try:
                lease = _lease_take(row.run_id)
            except LeaseHeld as exc:
                held = exc  # reported after the commit, so the refusal stays in the lease records
    if group is not None and group.holds(row.run_id):
        group.commit()
        return _call_attempt(pk, attempt, group)
    if held is not None:
        return AttemptResult(row.pk, "busy", detail=str(_busy(row.run_id, held)))
    owner = _Owner(row.run_id, lease)
    try:
        if lease.last_seq != read_at_seq:
            row = _row(row.pk)  # the run moved between the read and the lease: fresh, under the lease
            why = _not_now(row, attempt)
            if why:
                owner.release()
                return AttemptResult(row.pk, "skipped", detail=why)
        result = _reconcile_owned(owner, row, policy)
    except FenceError as exc:  # a flush before a remote effect was refused
        owner.release()
        return _fenced(AttemptResult(row.pk, "fenced"), exc)
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
        return _fenced(result, exc)
    except BaseException:
        owner.release()  # the append failed: nothing of ours was written
        raise
    _pause("after_append")
    return result


def _reconcile_owned(owner: _Owner, row: UncertainCall, policy: Policy | None = None) -> AttemptResult:
    n = row.attempts + 1
    if policy is None:
        policy = policy_for(row.tool)
    now = djtz.now()
    # Only a call left unsettled by this attempt (backoff) carries the overdue escalation: any other
    # action either settles it now or asks a person for its own reason.
    pre: list[NewEvent] = []
    if _overdue(row, now) and row.risk_class == "irreversible" and not row.approval_pending and not row.escalated_at:
        # Past its deadline an irreversible call goes to a person at once; reconciliation keeps
        # trying, and evidence may still settle it before anyone answers.
        pre.append(_escalation(row, reason="overdue", question=f"{row.tool} call {row.call_id} is past its recovery deadline with no disposition: did it happen?"))
    ref = _ref(row)
    evidence: Evidence | None = None
    error = ""
    lookup_ms: float | None = None
    if policy.lookup is not None and not policy.unclassified:
        t0 = time.perf_counter()
        try:
            evidence = adapters.lookup(ref, policy.lookup, policy.semantic_fields)
        except AdapterError as exc:
            error = f"broken policy for {row.tool}: {exc}"
        except Exception as exc:  # an adapter that raises is this call's problem, not the pass's
            error = f"lookup adapter raised {type(exc).__name__}: {exc}"
        # Timed whatever the answer: a lookup that times out is exactly the slow one to see.
        lookup_ms = round((time.perf_counter() - t0) * 1000, 3)
        if error:
            evidence = Evidence("unavailable", error=error)
    _pause("after_lookup")
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
                _completion(row, content=evidence.observed, source="reconciliation", extra={"evidence_seq_attempt": n}),
                *_close_approval(row, decision="happened", reason=action.rule),
                _resolved(row, "completed", rule=action.rule),
            ]
        )
    elif k == "backoff":
        write([*pre, _attempt(row, n, evidence, action, lookup_ms=lookup_ms, next_in=backoff_s(n), error=error)])
    elif k == "pause_escalate":
        write(
            [
                _attempt(row, n, evidence, action, lookup_ms=lookup_ms, next_in=None),
                NewEvent("run_paused", {**_about(row), "reason": f"conflicting effect for {row.tool} call {row.call_id}"}),
                _escalation(
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
                _escalation(
                    row,
                    reason=action.reason or "policy",
                    question=f"{row.tool} call {row.call_id} may or may not have happened ({action.rule}). Decide what to record.",
                    evidence=evidence.as_dict() if evidence else None,
                )
            )
        write(events)
    elif k == "not_happened":
        write([_attempt(row, n, evidence, action, lookup_ms=lookup_ms, next_in=None), *_close_approval(row, decision="not_happened", reason=action.rule), _resolved(row, "not_happened", rule=action.rule)])
    elif k == "retry":
        write([_attempt(row, n, evidence, action, lookup_ms=lookup_ms, next_in=backoff_s(n))])
        _retry_owned(owner, row, policy, n, write=write, rule=action.rule, by=None, extra_before=[])
    elif k == "compensate":
        write([_attempt(row, n, evidence, action, lookup_ms=lookup_ms, next_in=None)])
        _compensate_owned(owner, row, policy, n, write=write, rule=action.rule, by=None)
    log.info("reconciliation attempt", extra={"pk": row.pk, "attempt": n, "action": k, "rule": action.rule})
    return result


def _retry_owned(owner: _Owner, row: UncertainCall, policy: Policy, n: int, *, write, rule: str, by: str | None, extra_before: list[NewEvent]) -> str:
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
        done = adapters.execute(_ref(row), policy.execute)
    except Exception as exc:
        done = adapters.Execution("uncertain", error=f"execute adapter raised {type(exc).__name__}: {exc}")
    _pause("after_execute")
    if done.outcome == "done":
        write([_completion(row, content=done.result, source="retry"), *(_close_approval(row, decision="retry_same_key", reason=rule) if by is None else []), _resolved(row, "retried", rule=None if by else rule, by=by)])
    elif done.outcome == "failed":
        # The receiver refused it outright: a proven failure, nothing happened, the key stays free.
        write([_completion(row, content=done.result or done.error, source="retry", is_error=True), *(_close_approval(row, decision="not_happened", reason=done.error) if by is None else []), _resolved(row, "not_happened", rule=None if by else f"{rule}; {done.error}", by=by)])
    else:
        write(
            [
                NewEvent(
                    "reconciliation_attempted",
                    {
                        **_about(row),
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


def _compensate_owned(owner: _Owner, row: UncertainCall, policy: Policy, n: int, *, write, rule: str, by: str | None) -> str:
    owner.flush()  # the attempt (or decision) that chose compensation is durable before the inverse runs
    try:
        done = adapters.compensate(_ref(row), policy.compensate)
    except Exception as exc:
        done = adapters.Execution("uncertain", error=f"compensate adapter raised {type(exc).__name__}: {exc}")
    if done.outcome == "done":
        write([_resolved(row, "compensated", rule=None if by else rule, by=by)])
    else:
        events = [
            NewEvent(
                "reconciliation_attempted",
                {
                    **_about(row),
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
            events.append(_escalation(row, reason="compensation", question=f"compensating {row.tool} call {row.call_id} failed: {done.error}", last_error=done.error))
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
    from django.db.models import Q

    now = djtz.now()
    qs = UncertainCall.objects.filter(Q(state__in=[S.OPEN, S.RECONCILING]) | Q(state=S.ESCALATED, escalation_reason="overdue"))
    if due_only:
        qs = qs.filter(Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=now))
    return qs.order_by("started_at", "id")


# --- decisions, claims, notes -----------------------------------------------------------------


def _check_version(row: UncertainCall, seen_version) -> None:
    if isinstance(seen_version, bool) or not isinstance(seen_version, int):
        raise InvalidDecision(f"seen_version must be the version number you saw, got {seen_version!r}")
    if row.version != seen_version:
        raise StaleDecision(pk=row.pk, seen_version=seen_version, version=row.version, state=row.state)


def decision_record(*, pk: int, decision: str, by, reason: str, seen_version: int, evidence_ref: str | None = None) -> UncertainCall:
    """Record a person's decision on an uncertain call and carry it out, all under the run's lease.

    happened: completion source=operator, resolved completed. not_happened: resolved not_happened.
    retry_same_key: retry through the execute hook, then its result. compensate: the compensate hook.
    escalate: hand it on, still escalated. Refused with StaleDecision when the call changed since
    ``seen_version`` (so a double submit writes once), InvalidDecision for a decision the policy
    cannot carry out; in both cases nothing is written.
    """
    if decision not in DECISIONS:
        raise InvalidDecision(f"decision {decision!r} is not one of {', '.join(DECISIONS)}")
    who = _name(by)
    if not isinstance(reason, str) or not reason.strip():
        raise InvalidDecision("a decision needs a reason")
    reason = reason.strip()[:2000]
    row = _row(pk)
    _check_version(row, seen_version)
    policy = policy_for(row.tool)
    if decision == "retry_same_key" and policy.execute is None:
        raise InvalidDecision(f"{row.tool} has no execute hook: a retry cannot be sent")
    if decision == "compensate" and policy.compensate is None:
        raise InvalidDecision(f"{row.tool} has no compensate hook")
    with _owning(row.run_id) as owner:
        row = _row(pk)
        _check_version(row, seen_version)
        if row.state == S.RESOLVED:
            raise StaleDecision(pk=pk, seen_version=seen_version, version=row.version, state=row.state)
        decided = NewEvent(
            "approval_decided",
            {
                **_about(row),
                "approved": decision in ("happened", "retry_same_key", "compensate"),
                "by": who,
                "reason": reason,
                "decision": decision,
                "evidence_ref": evidence_ref,
            },
        )

        def write(events):
            owner.append(events)

        if decision == "happened":
            content = {"recorded_by": who, "reason": reason, "evidence_ref": evidence_ref}
            write([decided, _completion(row, content=content, source="operator"), _resolved(row, "completed", by=who)])
        elif decision == "not_happened":
            write([decided, _resolved(row, "not_happened", by=who)])
        elif decision == "escalate":
            write([decided, _escalation(row, reason="escalated", question=f"escalated by {who}: {reason}")])
        elif decision == "retry_same_key":
            _retry_owned(owner, row, policy, row.attempts, write=write, rule=f"decided by {who}", by=who, extra_before=[decided])
        elif decision == "compensate":
            write([decided])
            _compensate_owned(owner, row, policy, row.attempts, write=write, rule=f"decided by {who}", by=who)
    return _row(pk)


def _note(*, pk: int, by: str, text: str, action: str, seen_version: int | None = None, assignee: str | None = None) -> UncertainCall:
    row = _row(pk)
    if seen_version is not None:
        _check_version(row, seen_version)
    with _owning(row.run_id) as owner:
        row = _row(pk)
        if seen_version is not None:
            _check_version(row, seen_version)
        payload = {**_about(row), "by": by, "text": text, "action": action}
        if assignee:
            payload["assignee"] = assignee
        owner.append([NewEvent("operator_note", payload)])
    return _row(pk)


def call_claim(*, pk: int, user, seen_version: int) -> UncertainCall:
    """Take the call: the queue shows who is on it. Recorded as an operator_note (action claim)."""
    who = _name(user)
    return _note(pk=pk, by=who, text=f"{who} claimed the call", action="claim", seen_version=seen_version)


def call_assign(*, pk: int, user, assignee, seen_version: int) -> UncertainCall:
    who, to = _name(user), _name(assignee)
    return _note(pk=pk, by=who, text=f"{who} assigned the call to {to}", action="assign", seen_version=seen_version, assignee=to)


def call_release(*, pk: int, user, seen_version: int) -> UncertainCall:
    who = _name(user)
    return _note(pk=pk, by=who, text=f"{who} released the call", action="release", seen_version=seen_version)


def call_note(*, pk: int, by, text: str) -> UncertainCall:
    """A person's note on the call, kept in the run's history (operator_note)."""
    if not isinstance(text, str) or not text.strip():
        raise RecoveryError("a note needs text")
    return _note(pk=pk, by=_name(by), text=text.strip()[:4000], action="note")


# --- policies ---------------------------------------------------------------------------------


def _policy_row_fields(p: Policy, source: dict) -> dict:
    return {**p.as_fields(), "source": source}


def _snapshot(row: ToolPolicy | None) -> dict | None:
    if row is None:
        return None
    return dict(row.source) if row.source else {"risk_class": row.risk_class, "strategy": row.strategy}


def _user_of(by):
    if by is None or isinstance(by, str):
        name = _name(by)
        User = get_user_model()
        return User.objects.filter(**{User.USERNAME_FIELD: name}).first(), name
    return by, by.get_username()


def _policy_store(p: Policy, source: dict, *, user, name: str, origin: str) -> str:
    row = ToolPolicy.objects.filter(tool=p.tool).first()
    before = _snapshot(row)
    if before == source and row is not None:
        return "unchanged"
    fields = _policy_row_fields(p, source)
    if row is None:
        ToolPolicy.objects.create(tool=p.tool, updated_by=name, **fields)
        outcome = "created"
    else:
        for k, v in fields.items():
            setattr(row, k, v)
        row.updated_by = name
        row.save()
        outcome = "updated"
    PolicyChange.objects.create(tool=p.tool, by=user, by_name=name, source=origin, before=before, after=source)
    terms_refresh(tool=p.tool)
    return outcome


def policies_load(*, text: str, by) -> dict[str, str]:
    """Load a section-4 TOML document, all or nothing; returns tool -> created|updated|unchanged."""
    import tomllib

    parsed = policies_parse(text)  # raises PolicyError naming the tool and field
    tables = tomllib.loads(text)["tools"]
    user, name = _user_of(by)
    out = {}
    with transaction.atomic():
        for p in parsed:
            out[p.tool] = _policy_store(p, tables[p.tool], user=user, name=name, origin="file")
    return out


def policy_update(*, tool: str, fields: dict, by) -> ToolPolicy:
    """Change some fields of a tool's policy (section-4 names and forms); recorded with who and when."""
    if not isinstance(fields, dict) or not fields:
        raise PolicyError("no fields to change")
    user, name = _user_of(by)
    with transaction.atomic():
        row = ToolPolicy.objects.select_for_update().filter(tool=tool).first()
        source = dict(row.source) if row is not None and row.source else {}
        for k, v in fields.items():
            if v is None:
                source.pop(k, None)
            else:
                source[k] = v
        p = policy_parse(tool, source)
        _policy_store(p, source, user=user, name=name, origin="edit")
    return ToolPolicy.objects.get(tool=tool)
