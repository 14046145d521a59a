"""The uncertain-call projection: tool calls whose start has no matching completion.

A rule table (``HANDLERS``) holds one handler per event type the projection reads, keyed by the
registry's ``EventType``, and lists every other type as deliberately ignored; ``rule_table``
refuses to import when a registered type has neither. ``rows_apply`` runs the table over a run's
events and its ``UncertainCall`` rows. The incremental path (``projection_apply``, registered with
``runs.store.projector_register``) calls it inside every append's transaction with the run's
unresolved rows; ``recovery.rebuild.projections_rebuild`` calls it with every event of every run
from an empty table. Because both paths run the same code over the same events in the same order,
the rebuilt table equals the incremental one (a test checks this on the fixtures and on generated
logs). Only ``version`` and ``updated_at`` may differ: they are concurrency tokens, and a policy
change bumps ``version`` without an event.

Which start a completion closes, and which key it completed, are the fold's own rules
(``runs.calls``), called here rather than restated. A start that completes while its writer still
owns the run was never uncertain, so its row is deleted rather than kept as resolved; the table
holds only calls that were, or still are, in doubt. A retry that Reckon itself starts carries
``retry_of`` (the original start's seq) and belongs to the original row instead of opening one.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Callable, Iterable

from django.conf import settings
from django.utils import timezone as djtz

from recovery.models import InFlightCall, ToolPolicy, UncertainCall
from recovery.policies import Policy, call_terms, policy_from_row, unclassified_policy
from recovery.rows import call_ids_allocate, events_at, in_flight_entry, row_update, run_rows_read, user_lookup
from runs.calls import completion_key, completion_pair, start_key
from runs.events import EventType, rule_table
from runs.fold import Event
from runs.models import Run
from runs.selectors import run_key_secret
from runs.upcasters import event_upcast, events_upcast

S = UncertainCall.State

# Attempts counted per outcome on the call's row (the four outcomes of a lookup, docs/formats.md).
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
        self._key_secret: tuple[str | None] | None = None
        self._open: tuple[frozenset[str], frozenset] | None = None

    def key_secret(self) -> str | None:
        """The run's key secret, read once and only for a start that recorded no key (runs.calls)."""
        if self._key_secret is None:
            self._key_secret = (run_key_secret(run_id=self.run_id),)
        return self._key_secret[0]

    def touch(self, row: UncertainCall, seq: int) -> None:
        row.version += 1
        row.last_seq = seq
        self.changed.add(id(row))

    def unresolved(self) -> list[UncertainCall]:
        return [r for r in self.rows if r.state != S.RESOLVED]

    def open_index(self) -> tuple[frozenset[str], frozenset]:
        """(call ids, keys) of the unresolved rows, kept until ``open_changed`` says a handler
        may have changed a row (``rows_apply``)."""
        if self._open is None:
            open_rows = self.unresolved()
            self._open = (frozenset(r.call_id for r in open_rows), frozenset(r.idempotency_key for r in open_rows))
        return self._open

    def open_changed(self) -> None:
        self._open = None

    def by_start(self, start_seq) -> UncertainCall | None:
        return next((r for r in self.rows if r.start_seq == start_seq), None)

    def target(self, p: dict) -> UncertainCall | None:
        """The row an event about a call refers to: the start it names (resolved or not), else the
        unresolved start it pairs with by call id, then by key (``runs.calls``)."""
        if p.get("start_seq") is not None:
            return self.by_start(p["start_seq"])
        cid = p.get("call_id")
        return completion_pair(self.unresolved(), str(cid) if cid is not None else None, p.get("idempotency_key"))

    def completion_flags(self, q: dict, seq: int, *, done, start) -> None:
        """What a completion tells about the other calls in doubt: a key it names that belongs to
        another open call (``start``: the start it pairs with by call id, if any), and any other
        start of the action it completed. ``done`` is the row it closes, if the run has one."""
        if q.get("is_error"):
            return
        _, foreign = completion_key(q, start, (r for r in self.unresolved() if r is not done))
        if foreign:
            self.flag_key_mismatch(foreign, start.idempotency_key, q.get("call_id"), seq)
        self.flag_duplicates(q.get("idempotency_key"), done, seq)

    def flag_duplicates(self, key: str | None, done: UncertainCall | None, seq: int) -> None:
        """The logical action ``key`` completed (again): any other start of it still in doubt may
        have happened too, so the effect may now exist twice."""
        if not key:
            return
        for other in self.unresolved():
            if other is not done and other.idempotency_key == key and not other.possible_duplicate:
                other.possible_duplicate = True
                self.touch(other, seq)

    def flag_key_mismatch(self, key: str, start_key: str, call_id, seq: int) -> None:
        """A completion that names another call's key (docs/recovery.md): it completed the start it
        pairs with by call id, and says nothing trustworthy about the call whose key it records. That
        call stays uncertain; its row says why, for the person who settles it."""
        for other in self.unresolved():
            if other.idempotency_key == key and other.call_id != str(call_id):
                other.last_error = (
                    f"key mismatch: the completion at seq {seq} pairs with call {call_id} (started with key {start_key}) "
                    f"by call id but records this call's key {key}; this call is not taken as completed until a person or the receiver settles it"
                )
                self.touch(other, seq)


@dataclass
class _StartKey:
    """A start the projection never built a row for (completed at once): its call id and key."""

    call_id: str
    idempotency_key: str


@dataclass
class Context:
    """What handlers need besides the rows and the event: which epoch wrote a seq, policies, users."""

    epoch_of: Callable[[int], int]
    policies: Policies
    users: Callable[[str], int | None]


# --- the handlers, one per event type ----------------------------------------------------------


def start_fields(run_id: str, p: dict, ts, secret: Callable[[], str | None]) -> dict:
    """What a live start gives its call's row of its own (``_started``), which is also what the
    call keeps in flight (``in_flight_entry``, the one-statement start of ``recovery.projection_forms``)."""
    return {
        "call_id": str(p["call_id"]),
        "idempotency_key": start_key(run_id, p, secret=secret),
        "tool": p["name"],
        "tenant": str(p.get("tenant") or "default")[:200],
        "started_at": _aware(ts),
    }


def _started(rr: RunRows, ev: Event, cx: Context) -> None:
    p, seq = ev.payload, ev.seq
    if p.get("retry_of") is not None:
        row = rr.by_start(p["retry_of"])
        if row is not None and row.state != S.RESOLVED:
            row.retry_seq = seq
            if row.state in (S.OPEN, S.IN_FLIGHT):
                row.state = S.RECONCILING
            rr.touch(row, seq)
        return
    fields = start_fields(rr.run_id, p, ev.ts, rr.key_secret)
    policy = cx.policies.get(p["name"])
    row = UncertainCall(
        run_id=rr.run_id,
        arguments=p.get("arguments"),
        start_seq=seq,
        start_epoch=cx.epoch_of(seq),
        state=S.IN_FLIGHT,
        version=0,
        **fields,
        **call_terms(policy, p.get("arguments"), fields["started_at"]),
    )
    rr.rows.append(row)
    rr.touch(row, seq)


def _completed(rr: RunRows, ev: Event, cx: Context) -> None:
    p, seq = ev.payload, ev.seq
    row = rr.target({"call_id": p.get("call_id"), "idempotency_key": p.get("idempotency_key")})
    by_call_id = row is not None and row.call_id == str(p.get("call_id"))
    rr.completion_flags(p, seq, done=row, start=row if by_call_id else None)
    if row is not None:
        if row.state == S.IN_FLIGHT and p.get("source", "live") == "live" and row.retry_seq is None:
            rr.rows.remove(row)
            rr.changed.discard(id(row))
            if row.pk is not None:
                rr.deleted.append(row)
        else:
            row.state = S.RESOLVED
            row.disposition = "failed" if p.get("is_error") and not p.get("idempotency_key") else "completed"
            row.resolved_by = f"completion ({p.get('source', 'live')})"
            row.resolution_kind = {"reconciliation": "automatic", "retry": "automatic", "operator": "person"}.get(p.get("source", "live"), "run")
            if row.resolution_kind == "person":  # a person's first act on a call is its first human touch
                row.first_touch_at = row.first_touch_at or _aware(ev.ts)
            row.resolved_seq = seq
            row.resolved_at = ev.ts
            row.retry_seq = None
            row.next_attempt_at = None
            rr.touch(row, seq)


def _uncertain(rr: RunRows, ev: Event, cx: Context) -> None:
    row = rr.target(ev.payload)
    if row is not None and row.state == S.IN_FLIGHT:
        row.state = S.OPEN
        row.uncertain_seq = ev.seq
        row.uncertain_reason = str(ev.payload.get("reason", ""))[:200]
        rr.touch(row, ev.seq)


def _attempted(rr: RunRows, ev: Event, cx: Context) -> None:
    p = ev.payload
    row = rr.target(p)
    if row is None:
        return
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
    rr.touch(row, ev.seq)


def _approval_requested(rr: RunRows, ev: Event, cx: Context) -> None:
    p = ev.payload
    if not p.get("idempotency_key"):
        return  # the agent's own approval before a call: not about an uncertain one
    row = rr.target(p)
    if row is None or row.state == S.RESOLVED:
        # A question about a settled call does not open it again: its resolution is a fact of the
        # log, and a call shown in doubt again could be decided, and carried out, a second time.
        return
    row.state = S.ESCALATED
    row.approval_pending = True
    if row.escalated_at is None:
        row.escalated_at = _aware(ev.ts)
    reason = str(p.get("reason") or "policy")[:32]
    # A person handing the call on does not change why it needed a person: their re-escalation keeps
    # the reason it had (decision_record writes it so). Logs from before that wrote "escalated"
    # for it; that name never overwrites a reason either. The engine's own escalations (overdue,
    # then conflict) still name the current reason, which decides whether attempts go on.
    if not row.escalation_reason or (reason != "escalated" and not p.get("re_escalation")):
        row.escalation_reason = reason
    if reason == "overdue" and row.next_attempt_at is None:
        row.next_attempt_at = _aware(ev.ts)
    if p.get("last_error"):
        row.last_error = str(p["last_error"])
    rr.touch(row, ev.seq)


def _approval_decided(rr: RunRows, ev: Event, cx: Context) -> None:
    if not ev.payload.get("idempotency_key"):
        return
    row = rr.target(ev.payload)
    if row is not None:
        row.approval_pending = False
        if ev.payload.get("by"):
            row.first_touch_at = row.first_touch_at or _aware(ev.ts)
        rr.touch(row, ev.seq)


def _resolved(rr: RunRows, ev: Event, cx: Context) -> None:
    p = ev.payload
    key = p["idempotency_key"]
    # The completion appended just before (same batch) already closed the named start; the
    # resolution still sets its disposition (retried, compensated...), and closes any other start
    # of the same action left open.
    named = rr.by_start(p.get("start_seq")) if p.get("start_seq") is not None else None
    for row in [r for r in rr.rows if r is named or (r.state != S.RESOLVED and r.idempotency_key == key)]:
        row.state = S.RESOLVED
        row.disposition = p["disposition"]
        row.resolved_by = str(p.get("by") or p.get("rule") or "")[:200]
        row.resolution_kind = "person" if p.get("by") else "automatic"
        if p.get("by"):
            row.first_touch_at = row.first_touch_at or _aware(ev.ts)
        row.resolved_seq = ev.seq
        row.resolved_at = ev.ts
        row.retry_seq = None
        row.next_attempt_at = None
        rr.touch(row, ev.seq)


def _note(rr: RunRows, ev: Event, cx: Context) -> None:
    p = ev.payload
    if not p.get("idempotency_key") and p.get("start_seq") is None:
        return
    row = rr.by_start(p["start_seq"]) if p.get("start_seq") is not None else rr.target(p)
    if row is None:
        return
    action = p.get("action", "note")
    row.first_touch_at = row.first_touch_at or _aware(ev.ts)
    if action in ("claim", "assign"):
        name = str(p.get("assignee") or p["by"])
        row.claimed_by_name = name[:150]
        row.claimed_by_id = cx.users(name)
        row.claimed_at = _aware(ev.ts)
    elif action == "release":
        row.claimed_by_name = ""
        row.claimed_by_id = None
        row.claimed_at = None
    else:
        row.notes += 1
    rr.touch(row, ev.seq)


HANDLERS = rule_table(
    "uncertain-call projection",
    {
        EventType.TOOL_CALL_STARTED: _started,
        EventType.TOOL_CALL_COMPLETED: _completed,
        EventType.TOOL_CALL_UNCERTAIN: _uncertain,
        EventType.RECONCILIATION_ATTEMPTED: _attempted,
        EventType.APPROVAL_REQUESTED: _approval_requested,
        EventType.APPROVAL_DECIDED: _approval_decided,
        EventType.TOOL_CALL_RESOLVED: _resolved,
        EventType.OPERATOR_NOTE: _note,
    },
    ignored=(
        EventType.RUN_STARTED,
        EventType.USER_MESSAGE,
        EventType.MODEL_TURN,
        EventType.CONTEXT_COMPACTED,
        EventType.MEMORY_WRITTEN,
        EventType.RUN_FINISHED,
        EventType.RUN_PAUSED,
        EventType.RUN_RESUMED,
        EventType.GUARDRAIL_TRIGGERED,
    ),
)
RELEVANT = frozenset(HANDLERS)  # the types an append must carry for the projector to run
# The handlers that, given an event naming its start seq, read and change that start's row alone
# (``RunRows.target`` goes by the start seq first); the others may change any row of the run.
_TARGETED = frozenset(t.value for t in (EventType.TOOL_CALL_UNCERTAIN, EventType.RECONCILIATION_ATTEMPTED, EventType.APPROVAL_REQUESTED, EventType.APPROVAL_DECIDED, EventType.OPERATOR_NOTE))
_STARTED = EventType.TOOL_CALL_STARTED.value
_COMPLETED = EventType.TOOL_CALL_COMPLETED.value


# What ``_completed_at_once`` reads of a pair before it knows it must flag: no upcaster changes
# these (``source`` is filled with "live", its default here), so the pair may be decided on the
# payloads as stored (tests/recovery/test_projection.py checks every upcaster).
PAIR_FIELDS = ("retry_of", "call_id", "source", "idempotency_key", "is_error")


def _completed_at_once(rr: RunRows, start: Event, nxt: Event, upcast: Callable[[Event], Event] | None = None) -> bool:
    """The common case, taken without building a row: a live start whose very next event is its
    live completion, paired by call id with no older open start of that call id in the way. The row
    would be created and deleted at once; only the flags it would raise on other rows remain.
    ``upcast``: the two events are as stored, and are upcast only if the flags must be raised."""
    p, q = start.payload, nxt.payload
    if p.get("retry_of") is not None or nxt.type != _COMPLETED or q.get("source", "live") != "live" or q.get("call_id") != p["call_id"]:
        return False
    if not rr.rows:
        # No call of the run in doubt: no start for the call id to pair with instead, and no row
        # for the completion to flag (a long import's common case).
        return True
    call_ids, keys = rr.open_index()
    cid = str(p["call_id"])
    if cid in call_ids:
        return False
    recorded = q.get("idempotency_key")
    # The flags land only on a call in doubt whose key the completion records (``completion_key``
    # names it, ``flag_duplicates`` finds it): with none, they would change nothing, and the
    # start's key need not be computed. A run with many calls in doubt (a long import has every
    # call whose completion a compaction replaced) pays a set lookup per pair, not a walk of them all.
    if recorded and (type(recorded) is not str or recorded in keys) and not q.get("is_error"):
        if upcast is not None:
            p, q = upcast(start).payload, upcast(nxt).payload
        rr.completion_flags(q, nxt.seq, done=None, start=_StartKey(cid, start_key(rr.run_id, p, secret=rr.key_secret)))
        rr.open_changed()
    return True


def rows_apply(
    rr: RunRows,
    events: Iterable[Event],
    *,
    epoch_of: Callable[[int], int],
    policies: Policies,
    users: Callable[[str], int | None],
    upcast: Callable[[Event], Event] | None = None,
) -> None:
    """Run the rule table over ``events`` (already upcast, in seq order) and the run's rows in ``rr``.

    ``upcast``: ``events`` are as stored, and each is upcast by it when a handler reads it. A pair
    completed at once (most of an agent's calls) is then never upcast at all: a long import's
    chunk had spent more on upcasting its pairs than on the rest of the projection."""
    events = [ev for ev in events if ev.type in HANDLERS]
    cx = Context(epoch_of, policies, users)
    started = EventType.TOOL_CALL_STARTED.value
    i, n = 0, len(events)
    while i < n:
        ev = events[i]
        if ev.type == started and i + 1 < n and _completed_at_once(rr, ev, events[i + 1], upcast):
            i += 2
            continue
        HANDLERS[ev.type](rr, ev if upcast is None else upcast(ev), cx)
        rr.open_changed()
        i += 1


def plain_in_flight(row: UncertainCall) -> bool:
    """A call in flight that nothing has happened to since its start: kept as an ``InFlightCall``
    (the narrow table) rather than a full row. Every handler that changes a row moves its
    ``last_seq`` past the start, so this is "only ``_started`` ever touched it"."""
    return row.state == S.IN_FLIGHT and row.last_seq == row.start_seq


def in_flight_write(run_id: str, rows: Iterable[UncertainCall]) -> None:
    """Set the run's calls in flight to ``rows`` (each with its id), replacing what it held.

    Each is kept under its call id, the earliest start of a call id, which a completion of that
    call id closes (``runs.calls.completion_pair``), so that the hot path finds and removes it by
    that key alone (``projection_statement``); a later start of the same call id in flight (rare:
    a writer reusing call ids) under ``call id#seq``, which the hot path never matches."""
    calls: dict[str, dict] = {}
    for r in sorted(rows, key=lambda r: r.start_seq):
        calls[r.call_id if r.call_id not in calls else f"{r.call_id}#{r.start_seq}"] = in_flight_entry(r)
    Run.objects.filter(run_id=run_id).update(in_flight=calls or None)


def _save(rr: RunRows) -> None:
    """Write what an apply changed. A row is in one of two places: the run row's calls in flight
    while it is a plain call in flight, the full table from the moment anything else happened to it
    (it keeps its id across the move); a call that completed live leaves neither."""
    full_gone = [r.pk for r in rr.deleted if not getattr(r, "_narrow", False)]
    if full_gone:
        UncertainCall.objects.filter(pk__in=full_gone).delete()
    narrow_changed = any(getattr(r, "_narrow", False) for r in rr.deleted)
    narrow_new: list[UncertainCall] = []
    narrow_kept: list[UncertainCall] = []
    promoted: list[UncertainCall] = []
    for row in rr.rows:
        if getattr(row, "_narrow", False):
            if plain_in_flight(row):
                narrow_kept.append(row)
            else:
                promoted.append(row)
        elif row.pk is None and plain_in_flight(row):
            narrow_new.append(row)
    if narrow_new:
        for row, pk in zip(narrow_new, call_ids_allocate(n=len(narrow_new))):
            row.pk = pk
    if narrow_changed or narrow_new or promoted:
        # Every call in flight of the run was read into ``rr`` (projection_apply), so the kept ones
        # and the new ones are the whole of it. The run row is already locked by the append's fence.
        in_flight_write(rr.run_id, narrow_kept + narrow_new)
    now = djtz.now()
    for row in promoted:
        row.updated_at = now
        row._narrow = False
        row.save(force_insert=True)
    inserted = {id(r) for r in narrow_new} | {id(r) for r in promoted}
    for row in rr.rows:
        if id(row) in rr.changed and id(row) not in inserted:
            row.updated_at = now
            row_update(row)


def in_flight_rows(run_id: str, narrow: list[InFlightCall], *, policies: Policies | None = None) -> list[UncertainCall]:
    """The full rows the projection works with for ``narrow`` calls in flight: each built by
    ``_started`` from its start event, exactly as when the start was appended, keeping its id."""
    if not narrow:
        return []
    by_seq = {n.start_seq: n for n in narrow}
    starts = events_upcast(events_at(run_id=run_id, seqs=sorted(by_seq)), run_id)
    rr = RunRows(run_id, [])
    cx = Context(lambda seq: by_seq[seq].start_epoch, policies or Policies(), lambda name: None)
    for ev in starts:
        _started(rr, ev, cx)
    for row in rr.rows:
        n = by_seq[row.start_seq]
        row.pk = n.id
        row._narrow = True
        row.updated_at = None
    rr.changed.clear()
    return rr.rows


def projection_apply(run_id: str, events: list[Event], epoch: int) -> None:
    """The projector: keep the run's rows in step with an append, inside its transaction.

    ``epoch`` is the epoch the append's fence accepted: the one that wrote these events.
    """
    relevant = [ev for ev in events if ev.type in HANDLERS]
    if not relevant:
        return
    # The run's unresolved rows, plus any resolved row an event names by its start: the same rows a
    # rebuild would have in hand at this point of the log.
    named = {ev.payload.get("start_seq") for ev in relevant} | {ev.payload.get("retry_of") for ev in relevant}
    named.discard(None)
    policies = Policies()
    # Events whose handlers read only the row their start seq names (an escalation, an attempt, a
    # decision, a note) need no other row of the run: a run with fifty calls in doubt cost every
    # escalation fifty rows read and built.
    targeted = all(ev.type in _TARGETED and type(ev.payload.get("start_seq")) is int for ev in relevant)
    rows, narrow = run_rows_read(run_id, named, unresolved=not targeted)
    for row in rows:
        row._narrow = False
    rows += in_flight_rows(run_id, narrow, policies=policies)
    rr = RunRows(run_id, rows)

    def epoch_of(seq: int) -> int:
        return epoch

    def upcast(ev: Event) -> Event:
        return event_upcast(ev, run_id)

    rows_apply(rr, relevant, epoch_of=epoch_of, policies=policies, users=user_lookup(), upcast=upcast)
    _save(rr)


def in_flight_call_get(*, pk) -> UncertainCall | None:
    """The call in flight kept in the narrow table under ``pk``, as the full row it would be
    (state in_flight, its policy's terms), or None. Reads only: the row is not written anywhere."""
    try:
        pk = int(pk)
    except (TypeError, ValueError):
        return None
    narrow = InFlightCall.objects.filter(id=pk).first()
    if narrow is None:
        return None
    (row,) = in_flight_rows(narrow.run_id, [narrow])
    return row


def in_flight_calls_list(*, tool: str | list[str] | None = None, tenant: str | list[str] | None = None, started_before=None, limit: int | None = None) -> list[UncertainCall]:
    """Calls in flight kept in the narrow table, as full rows, oldest first (the queue's order).
    ``tool`` and ``tenant``: an exact value or a list of them."""
    qs = InFlightCall.objects.order_by("started_at", "id")
    if tool is not None and tool != "":
        qs = qs.filter(tool__in=[tool] if isinstance(tool, str) else tool)
    if tenant is not None and tenant != "":
        qs = qs.filter(tenant__in=[tenant] if isinstance(tenant, str) else tenant)
    if started_before is not None:
        qs = qs.filter(started_at__lte=started_before)
    narrow = list(qs[:limit] if limit is not None else qs)
    policies = Policies()
    by_run: dict[str, list[InFlightCall]] = {}
    for n in narrow:
        by_run.setdefault(n.run_id, []).append(n)
    rows = [r for rid, ns in by_run.items() for r in in_flight_rows(rid, ns, policies=policies)]
    return sorted(rows, key=lambda r: (r.started_at, r.pk))
