"""Reads of the recovery engine. The console, the API and the commands call these; none queries
``UncertainCall`` by hand, so "most dangerous first" and "overdue" mean one thing everywhere."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from django.db.models import Case, Count, IntegerField, Min, Q, Value, When
from django.utils import timezone as djtz

from recovery.models import ToolPolicy, UncertainCall
from recovery.policies import Policy, policy_from_row, unclassified_policy
from runs.store import events_load

S = UncertainCall.State
UNRESOLVED = (S.OPEN, S.RECONCILING, S.ESCALATED)
STATES = tuple(S.values)


class QueryError(ValueError):
    """A filter value that cannot be used; the message names the parameter."""


@dataclass
class Page:
    items: list[UncertainCall]
    next: str | None  # the cursor for the following page, None on the last


def policy_for(tool: str) -> Policy:
    """The tool's policy, or the unclassified default (irreversible, escalate)."""
    row = ToolPolicy.objects.filter(tool=tool).first()
    return policy_from_row(row) if row is not None else unclassified_policy(tool)


def is_overdue(row: UncertainCall, now: datetime | None = None) -> bool:
    """Past its deadline with no disposition."""
    now = now or djtz.now()
    return row.state != S.RESOLVED and row.deadline is not None and row.deadline < now


def _danger(now: datetime):
    # 0: the effect may exist twice; 1: irreversible and past its deadline; 2: the rest (by age).
    return Case(
        When(possible_duplicate=True, then=Value(0)),
        When(Q(risk_class="irreversible") & Q(deadline__lt=now) & ~Q(state=S.RESOLVED), then=Value(1)),
        default=Value(2),
        output_field=IntegerField(),
    )


def _cursor_encode(danger: int, started_at: datetime, pk: int) -> str:
    raw = f"{danger}|{started_at.astimezone(timezone.utc).isoformat()}|{pk}"
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _cursor_decode(cursor: str) -> tuple[int, datetime, int]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        d, ts, pk = raw.split("|")
        return int(d), datetime.fromisoformat(ts), int(pk)
    except (ValueError, UnicodeDecodeError):
        raise QueryError(f"after={cursor!r} is not a cursor this list returned") from None


def uncertain_calls_filter(
    *,
    risk_class: str | None = None,
    tool: str | None = None,
    tenant: str | None = None,
    state: str | list[str] | None = None,
    min_age_s: float | None = None,
    possible_duplicate: bool | None = None,
    after: str | None = None,
    limit: int = 50,
) -> Page:
    """The queue, most dangerous first: possible duplicates, then overdue irreversible calls, then age.

    ``state`` defaults to the unresolved states (open, reconciling, escalated); pass "all" or a list.
    Keyset pagination: pass the returned ``next`` as ``after``. Each item carries ``danger`` (0, 1, 2)
    and ``overdue`` attributes.
    """
    now = djtz.now()
    if state is None:
        states = list(UNRESOLVED)
    elif state == "all":
        states = list(STATES)
    else:
        states = [state] if isinstance(state, str) else list(state)
        bad = [s for s in states if s not in STATES]
        if bad:
            raise QueryError(f"state {bad[0]!r} is not one of {', '.join(STATES)}")
    if risk_class is not None and risk_class not in UncertainCall.Risk.values:
        raise QueryError(f"risk_class {risk_class!r} is not one of {', '.join(UncertainCall.Risk.values)}")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 500:
        raise QueryError(f"limit must be between 1 and 500, got {limit!r}")
    qs = UncertainCall.objects.filter(state__in=states).annotate(danger=_danger(now))
    if risk_class:
        qs = qs.filter(risk_class=risk_class)
    if tool:
        qs = qs.filter(tool=tool)
    if tenant:
        qs = qs.filter(tenant=tenant)
    if possible_duplicate is not None:
        qs = qs.filter(possible_duplicate=bool(possible_duplicate))
    if min_age_s is not None:
        try:
            qs = qs.filter(started_at__lte=now - timedelta(seconds=float(min_age_s)))
        except (TypeError, ValueError, OverflowError):
            raise QueryError(f"min_age_s must be a number of seconds, got {min_age_s!r}") from None
    if after:
        d, ts, pk = _cursor_decode(after)
        qs = qs.filter(Q(danger__gt=d) | Q(danger=d, started_at__gt=ts) | Q(danger=d, started_at=ts, id__gt=pk))
    items = list(qs.select_related("claimed_by").order_by("danger", "started_at", "id")[: limit + 1])
    for row in items:
        row.overdue = is_overdue(row, now)
    nxt = None
    if len(items) > limit:
        items = items[:limit]
        last = items[-1]
        nxt = _cursor_encode(last.danger, last.started_at, last.pk)
    return Page(items, nxt)


def uncertain_call_get(*, pk: int) -> UncertainCall:
    from recovery.services import CallNotFound

    try:
        row = UncertainCall.objects.select_related("claimed_by").get(pk=pk)
    except (UncertainCall.DoesNotExist, ValueError, TypeError):
        raise CallNotFound(pk) from None
    row.overdue = is_overdue(row)
    return row


_HISTORY_TYPES = {
    "tool_call_started",
    "tool_call_uncertain",
    "reconciliation_attempted",
    "tool_call_completed",
    "approval_requested",
    "approval_decided",
    "tool_call_resolved",
    "operator_note",
    "run_paused",
}


def uncertain_call_evidence(*, pk: int) -> dict:
    """The call's recovery history from the log: every attempt with its evidence, and every step.

    ``attempts``: one dict per reconciliation_attempted (seq, ts, attempt, phase, outcome, rule,
    action, error, evidence). ``history``: every event about the call (seq, ts, type, payload).
    """
    row = uncertain_call_get(pk=pk)
    events = events_load(run_id=row.run_id, after=row.start_seq - 1)
    history, attempts = [], []
    for ev in events:
        if ev.type not in _HISTORY_TYPES:
            continue
        p = ev.payload
        mine = (
            ev.seq == row.start_seq
            or p.get("start_seq") == row.start_seq
            or p.get("retry_of") == row.start_seq
            or (p.get("start_seq") is None and row.idempotency_key and p.get("idempotency_key") == row.idempotency_key)
            or (ev.type == "tool_call_completed" and p.get("call_id") == row.call_id and ev.seq == row.resolved_seq)
        )
        if not mine:
            continue
        history.append({"seq": ev.seq, "ts": ev.ts, "type": ev.type, "payload": p})
        if ev.type == "reconciliation_attempted":
            attempts.append(
                {
                    "seq": ev.seq,
                    "ts": ev.ts,
                    "attempt": p.get("attempt"),
                    "phase": p.get("phase", "lookup"),
                    "outcome": p.get("outcome"),
                    "rule": p.get("rule"),
                    "action": p.get("action"),
                    "error": p.get("error"),
                    "evidence": p.get("evidence"),
                }
            )
    return {"call": row, "attempts": attempts, "history": history}


def queue_figures_by_risk() -> dict[str, dict]:
    """Per risk class: opened, reconciled automatically, escalated, still open, age of the oldest
    open call in seconds, and the named overdue calls (the number that matters for irreversible tools)."""
    now = djtz.now()
    became_uncertain = UncertainCall.objects.exclude(state=S.IN_FLIGHT)
    agg = became_uncertain.values("risk_class").annotate(
        opened=Count("id"),
        reconciled=Count("id", filter=Q(state=S.RESOLVED, resolution_kind="automatic")),
        escalated=Count("id", filter=Q(escalated_at__isnull=False)),
        still_open=Count("id", filter=Q(state__in=UNRESOLVED)),
        oldest=Min("started_at", filter=Q(state__in=UNRESOLVED)),
    )
    out = {
        r: {"opened": 0, "reconciled_automatically": 0, "escalated": 0, "still_open": 0, "oldest_age_s": None, "overdue": []}
        for r in UncertainCall.Risk.values
    }
    for a in agg:
        f = out[a["risk_class"]]
        f.update(opened=a["opened"], reconciled_automatically=a["reconciled"], escalated=a["escalated"], still_open=a["still_open"])
        f["oldest_age_s"] = round((now - a["oldest"]).total_seconds(), 1) if a["oldest"] else None
    overdue = became_uncertain.filter(state__in=UNRESOLVED, deadline__lt=now).order_by("deadline", "id")
    for row in overdue.values("id", "run_id", "call_id", "tool", "idempotency_key", "deadline", "risk_class", "state"):
        out[row["risk_class"]]["overdue"].append(
            {
                "pk": row["id"],
                "run_id": row["run_id"],
                "call_id": row["call_id"],
                "tool": row["tool"],
                "idempotency_key": row["idempotency_key"],
                "state": row["state"],
                "deadline": row["deadline"],
                "overdue_s": round((now - row["deadline"]).total_seconds(), 1),
            }
        )
    return out


def uncertain_calls_export(*, state: str | list[str] | None = None) -> list[dict]:
    """The ``manage.py uncertain --json`` objects (CONTRACTS section 6), most dangerous first."""
    from runs.fold import format_ts

    out, after = [], None
    while True:
        page = uncertain_calls_filter(state=state, after=after, limit=500)
        for r in page.items:
            out.append(
                {
                    "run_id": r.run_id,
                    "call_id": r.call_id,
                    "tool": r.tool,
                    "idempotency_key": r.idempotency_key,
                    "arguments": r.arguments,
                    "started_at": format_ts(r.started_at),
                    "start_seq": r.start_seq,
                    "risk_class": r.risk_class,
                    "deadline": format_ts(r.deadline),
                    "state": r.state,
                    "possible_duplicate": r.possible_duplicate,
                }
            )
        if page.next is None:
            return out
        after = page.next
