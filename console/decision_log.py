"""The decision log's reads: every decision and automatic resolution, newest first, filtered by
who, tool, tenant, disposition, kind and period, paged by an opaque cursor, and counted where a
count is cheap enough to give.
"""

from __future__ import annotations

from datetime import datetime

from django.db.models import Exists, OuterRef, Q, Subquery, TextField
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast, Coalesce

from console.selectors import events_shown
from recovery.models import UncertainCall
from runs.models import Event
from runs.paging import CursorError, Page, cursor_decode, cursor_encode

DECISION_LOG_TYPES = ("approval_decided", "tool_call_resolved")


def decision_cursor(ev) -> str:
    """The keyset cursor that follows ``ev`` in the decision log: the decision's own time, seq and run."""
    return cursor_encode(ev.ts, ev.seq, ev.run_id)


def decision_cursor_parse(text: str) -> tuple[datetime, int, str]:
    """``decision_cursor``'s text back to (ts, seq, run_id); ValueError names what is wrong."""
    try:
        return cursor_decode(text, (datetime, int, str))
    except CursorError as exc:
        raise ValueError(f"before must be a cursor from the decision log's 'Older decisions' link ({exc}), got {text[:80]!r}") from None


DECISION_LOG_PAGE = 50


# Filters tested on each decision row: its payload's fields, or its call looked up. A page with one
# of them is found by walking the log newest first (``_decisions_walk``).
PAYLOAD_FILTERS = ("by", "disposition", "kind")
CALL_FILTERS = ("tool", "tenant")
FILTERED_COUNT_CAP = 1_000


def decisions_count(*, cap: int = 10_000, shown: Page | None = None, before: str | None = None, **search) -> tuple[int | None, bool]:
    """How many decisions the log's filters match, counting at most ``cap`` (then ``(cap, False)``).

    ``(None, False)`` with a tool or tenant filter: each decision's call is looked up to test it,
    and counting 10,000 of them that way took most of a second (``bench console``), where the page
    itself needs only its fifty. With a filter on the payload's fields each decision's payload is
    parsed to test it, so the count stops at ``FILTERED_COUNT_CAP``; and when ``shown``, the first
    page (``before`` None), already holds every match (its walk read the whole log), it is the count.
    The count is of the whole log whatever page ``before`` names."""
    if any(search.get(f) for f in CALL_FILTERS):
        return None, False
    if any(search.get(f) for f in PAYLOAD_FILTERS):
        if shown is not None and before is None and shown.next_cursor is None:
            return len(shown.items), True
        cap = min(cap, FILTERED_COUNT_CAP)
    qs = decisions_search(query_only=True, **search)
    n = qs.order_by()[: cap + 1].count()
    return (n, True) if n <= cap else (cap, False)


def decisions_search(*, by: str = "", tool: str = "", tenant: str = "", disposition: str = "", kind: str = "", since=None, until=None, before: str | None = None, limit: int = DECISION_LOG_PAGE, query_only: bool = False):
    """Every human and automatic recovery decision across runs, newest first by the decision's own
    time (``ts``, not when it was stored: an imported history keeps its order; keyset on time, run
    and seq; ``before`` is a ``decision_cursor``).

    People's decisions are ``approval_decided`` events (with ``decision``, or ``approved`` in a
    version-1 log), and every final disposition, a person's or a rule's, is a ``tool_call_resolved``.
    Tool and tenant come from the uncertain call the event is about, matched by run and idempotency
    key, or by call id where the event has no key (version 1). ``by`` matches a person's name or a
    rule's text containing it, ignoring case; ``tool`` and ``tenant`` likewise.
    """
    from recovery.selectors import calls_values_containing

    # Every decision in the time range: the rows the filters below test, and the index a filtered
    # page walks (``_decisions_walk``).
    base = Event.objects.filter(type__in=DECISION_LOG_TYPES)
    if since is not None:
        base = base.filter(ts__gte=since)
    if until is not None:
        base = base.filter(ts__lt=until)
    qs = base.annotate(
        key=KeyTextTransform("idempotency_key", "payload"),
        p_call_id=KeyTextTransform("call_id", "payload"),
        # As plain text (Cast), so the filters below are ordinary text comparisons rather than
        # Django's JSON-aware lookups, which compile to jsonb operators on PostgreSQL.
        p_by=Cast(KeyTextTransform("by", "payload"), TextField()),
        p_rule=Cast(KeyTextTransform("rule", "payload"), TextField()),
        p_disposition=Cast(KeyTextTransform("disposition", "payload"), TextField()),
        p_decision=Cast(KeyTextTransform("decision", "payload"), TextField()),
    )
    by_key = UncertainCall.objects.filter(run_id=OuterRef("run_id"), idempotency_key=OuterRef("key"))
    by_call_id = UncertainCall.objects.filter(run_id=OuterRef("run_id"), call_id=OuterRef("p_call_id"))
    if by:
        qs = qs.filter(Q(p_by__icontains=by) | Q(p_rule__icontains=by))
    if disposition:
        qs = qs.filter(Q(p_disposition=disposition) | Q(p_decision=disposition))
    if kind == "person":
        qs = qs.filter(p_by__isnull=False)
    elif kind == "automatic":
        qs = qs.filter(p_by__isnull=True)
    for name, text in (("tool", tool), ("tenant", tenant)):
        if text:
            names = calls_values_containing(column=name, text=text)
            qs = qs.filter(Exists(by_key.filter(**{f"{name}__in": names})) | Exists(by_call_id.filter(**{f"{name}__in": names})))
    if query_only:
        return qs
    if before is not None:
        at, seq, run_id = decision_cursor_parse(before)
        qs, base = _older_than(qs, (at, run_id, seq)), _older_than(base, (at, run_id, seq))
    qs = qs.annotate(
        tool=Coalesce(Subquery(by_key.values("tool")[:1]), Subquery(by_call_id.values("tool")[:1])),
        tenant=Coalesce(Subquery(by_key.values("tenant")[:1]), Subquery(by_call_id.values("tenant")[:1])),
        call_pk=Coalesce(Subquery(by_key.values("pk")[:1]), Subquery(by_call_id.values("pk")[:1])),
    ).order_by(*_NEWEST_FIRST)
    filtered = by or tool or tenant or disposition or kind
    rows = _decisions_walk(qs, base, limit + 1) if filtered else list(qs[: limit + 1])
    more = len(rows) > limit
    rows = rows[:limit]
    return Page(rows, decision_cursor(rows[-1]) if more and rows else None)


_NEWEST_FIRST = ("-ts", "-run_id", "-seq")


def _older_than(qs, edge: tuple[datetime, str, int]):
    """The rows after ``edge`` (ts, run_id, seq) newest first. ``ts <= at`` repeats the keyset's
    first column on its own, so the planner reads it as a range of the decision index."""
    at, run_id, seq = edge
    return qs.filter(ts__lte=at).filter(Q(ts__lt=at) | Q(ts=at, run_id__lt=run_id) | Q(ts=at, run_id=run_id, seq__lt=seq))


def _edge_or_newer(qs, edge: tuple[datetime, str, int]):
    """``edge`` and the rows before it newest first: what ``_older_than(qs, edge)`` leaves out."""
    at, run_id, seq = edge
    return qs.filter(ts__gte=at).filter(Q(ts__gt=at) | Q(ts=at, run_id__gt=run_id) | Q(ts=at, run_id=run_id, seq__gte=seq))


_WALK_FIRST = 200


def _decisions_walk(qs, base, n: int) -> list:
    """The first ``n`` rows of ``qs`` (filtered row by row) newest first, read range by range of
    the decision index: the newest ``_WALK_FIRST`` decisions, then five times as many, and so on.

    Asked for the whole log at once, the planner cannot tell how many decisions a text filter
    keeps, guesses a few, and reads and sorts all of them (10,000 decisions, 70 ms, where a
    common name's fifty newest are among the first hundred); a range bounds what each query reads.
    """
    rows: list = []
    upper = None  # the range's newer end: the last range's oldest decision
    size = _WALK_FIRST
    while len(rows) < n:
        older = base if upper is None else _older_than(base, upper)
        edge = older.order_by(*_NEWEST_FIRST).values_list("ts", "run_id", "seq")[size - 1 : size].first()
        chunk = qs if upper is None else _older_than(qs, upper)
        if edge is not None:
            chunk = _edge_or_newer(chunk, edge)
        rows += list(chunk[: n - len(rows)])
        if edge is None:
            break
        upper, size = edge, size * 5
    return rows


def decisions_shown(*, fields: frozenset[str], **search) -> Page:
    page = decisions_search(**search)
    events_shown(page.items, fields)
    return page
