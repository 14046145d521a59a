"""Find anything: runs, calls (in doubt, settled or still in flight) and decisions by one text.

What a query matches, ignoring case:

- runs by the start of their run id (the whole id, or its first characters);
- calls by the start of their call id, idempotency key or run id, and by any part of the values
  of their arguments, in the uncertain call table and in the narrow in-flight table (which keeps
  no arguments of its own: a call in flight shows those of its start event);
- decisions (``approval_decided`` and ``tool_call_resolved``) by their evidence reference and, for
  the calls found, by the call's key.

A call is found by an argument's value only where the person searching may see that value: for
someone whose sensitive fields are masked the arguments are matched as masked (by key and by
value, the screens' own rule), so a masked account number finds nothing. When a person who may see
sensitive values is shown one in a result (the argument that matched), the view records it in the
access record before showing it.

On PostgreSQL ids are matched through btree indexes of ``UPPER(column)`` and texts through
``pg_trgm`` GIN indexes of ``UPPER(text)`` (console migration 0004): the same expressions are
written here and in the migration, so the planner uses them. SQLite has no such index and scans; it
serves small installations.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from django.db import connection
from django.db.models import BooleanField, Count, Q
from django.db.models.expressions import RawSQL

from recovery.masking import MASK, NEVER_REVEALED, key_shown, run_sensitive_values, value_mask
from recovery.models import UNRESOLVED_STATES, InFlightCall, UncertainCall
from recovery.projection import in_flight_rows
from runs.models import Event, Run

MIN_CHARS = 3  # a trigram index needs three characters; shorter text would scan every table
MAX_CHARS = 200
PER_KIND = 20
DECISION_TYPES = ("approval_decided", "tool_call_resolved")
# Calls fetched before the argument check (which drops those matched only by a key name, or by a
# value the searcher may not see); the rest are left for a narrower query.
CANDIDATES = 200
INDEX_BUDGET_MS = 25  # how long a trigram index may take before the text counts as common


class SearchError(ValueError):
    """A query that cannot be searched; the message says why."""


@dataclass
class CallHit:
    call: object
    in_flight: bool
    matched: list[str] = field(default_factory=list)  # what matched: "call id", "key", "argument account", ...
    shown_arguments: object = None
    revealed: list[str] = field(default_factory=list)  # argument names shown unmasked because they matched
    shown_key: str = ""  # the key as shown: masked when it is one of the run's sensitive values (a legacy key)


@dataclass
class Results:
    q: str
    runs: list = field(default_factory=list)
    calls: list[CallHit] = field(default_factory=list)
    decisions: list = field(default_factory=list)
    more: dict = field(default_factory=dict)  # kind -> True when more than PER_KIND matched

    @property
    def total(self) -> int:
        return len(self.runs) + len(self.calls) + len(self.decisions)


def query_clean(raw: str) -> str:
    """The text to search for, or SearchError naming the rule it breaks."""
    q = (raw or "").strip()
    if "\x00" in q:
        raise SearchError("the text must not contain NUL characters")
    if len(q) < MIN_CHARS:
        raise SearchError(f"type at least {MIN_CHARS} characters (you typed {len(q)})")
    if len(q) > MAX_CHARS:
        raise SearchError(f"type at most {MAX_CHARS} characters (you typed {len(q)})")
    return q


def _like(q: str) -> str:
    return "%" + q.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def starts(column_sql: str, q: str, *, lookup: str) -> Q | RawSQL:
    """A filter: ``column`` starts with ``q`` ignoring case, in the btree-indexed spelling on PostgreSQL."""
    if connection.vendor == "postgresql":
        pattern = q.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        return RawSQL(f"UPPER({column_sql}) LIKE UPPER(%s)", [pattern], output_field=BooleanField())
    return Q(**{f"{lookup}__istartswith": q})


def _first(qs, n: int) -> list:
    """At most ``n`` rows of ``qs`` (a trigram match), fast whether the text is rare or common.

    A trigram index answers a rare text at once but must collect every match of a common one
    before the first row comes back (all 100,000 calls of an amount: 400 ms). So the index gets a
    short time; past it the text is common, and a plain scan of the table, which stops at the
    ``n``-th match, finds them sooner.
    """
    if connection.vendor != "postgresql":
        return list(qs[:n])
    from django.db import OperationalError, transaction

    from runs.pg import settings_local

    with settings_local(statement_timeout=f"{INDEX_BUDGET_MS}ms"):
        try:
            with transaction.atomic():
                return list(qs[:n])
        except OperationalError:
            pass  # cancelled: the text is common
    with settings_local(enable_bitmapscan="off"):
        return list(qs[:n])


def contains(column_sql: str, q: str, *, lookup: str) -> Q | RawSQL:
    """A filter: ``column`` contains ``q`` ignoring case. On PostgreSQL the expression is exactly the
    one the trigram indexes are built on (``UPPER(<column>) LIKE UPPER(pattern)``); elsewhere it is
    Django's ``icontains`` on ``lookup``."""
    if connection.vendor == "postgresql":
        return RawSQL(f"UPPER({column_sql}) LIKE UPPER(%s)", [_like(q)], output_field=BooleanField())
    return Q(**{f"{lookup}__icontains": q})


def _filter(qs, *conds):
    """``qs`` filtered by the OR of ``conds`` (Q objects or boolean expressions)."""
    combined = None
    for c in conds:
        c = c if isinstance(c, Q) else Q(c)
        combined = c if combined is None else combined | c
    return qs.filter(combined)


def _texts(value, path=""):
    """Every (path, text) leaf of an argument document."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _texts(v, f"{path}{k}." if path else f"{k}.")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _texts(v, f"{path}{i}.")
    elif value is not None:
        yield path.rstrip(".") or "(value)", value if isinstance(value, str) else json.dumps(value)


def argument_matches(arguments, q: str, *, fields: frozenset[str], values: frozenset[str]) -> list[str]:
    """The paths of the argument values that contain ``q`` as the searcher sees them: masked by
    ``fields`` and ``values`` (empty: sees everything). A masked value matches nothing."""
    seen = value_mask(arguments, fields, values) if fields else arguments
    needle = q.casefold()
    return [p for p, text in _texts(seen) if needle in text.casefold() and text != MASK]


def _runs_matching(q: str, n: int) -> list:
    """At most ``n`` runs whose id contains ``q`` ignoring case, as the runs page's "Run id contains"
    finds them: those whose id starts with it first (a btree range), then the others (the trigram
    index of run ids on PostgreSQL). Unordered in SQL (sorting every match would read them all),
    sorted once fetched."""
    col = '"reckon_run"."run_id"'
    first = sorted(_filter(Run.objects.all(), starts(col, q, lookup="run_id")).order_by()[:n], key=lambda r: r.run_id)
    if len(first) < n:
        rest = _first(_filter(Run.objects.all(), contains(col, q, lookup="run_id")).exclude(run_id__in=[r.run_id for r in first]).order_by(), n - len(first))
        first += sorted(rest, key=lambda r: r.run_id)
    return first


def search(*, q: str, fields: frozenset[str], sensitive: frozenset[str], per_kind: int = PER_KIND) -> Results:
    """Runs, calls and decisions matching ``q`` (already ``query_clean``), ``per_kind`` of each.

    ``fields``: what the searcher has masked (``access.masking.mask_for``); ``sensitive``: every
    sensitive field (the results' arguments are shown masked by it, except an argument that matched
    for a searcher who may see it, listed in ``CallHit.revealed`` for the access record).
    """
    res = Results(q=q)
    may_see = fields <= NEVER_REVEALED  # the searcher's mask hides nothing but the key secret
    runs = _runs_matching(q, per_kind + 1)
    res.more["runs"] = len(runs) > per_kind
    res.runs = runs[:per_kind]
    if res.runs:
        open_counts = dict(
            UncertainCall.objects.filter(run_id__in=[r.run_id for r in res.runs], state__in=UNRESOLVED_STATES).values_list("run_id").annotate(n=Count("id")).order_by()
        )
        for r in res.runs:
            r.open_calls = open_counts.get(r.run_id, 0)
    hits = _calls_matching(q, fields, may_see, per_kind)
    # Calls in doubt first, then in flight, then settled; the most recent first within each.
    order = {"escalated": 0, "open": 0, "reconciling": 0, "in_flight": 1}
    calls = sorted(hits.values(), key=lambda h: (order.get(getattr(h.call, "state", "in_flight"), 2), -h.call.started_at.timestamp()))
    res.more["calls"] = len(calls) > per_kind
    res.calls = calls[:per_kind]
    _calls_shown(res.calls, q, sensitive, may_see)
    decisions = _decisions_matching(q, res.calls, per_kind)
    res.more["decisions"] = len(decisions) > per_kind
    res.decisions = decisions[:per_kind]
    return res


def _calls_matching(q: str, fields: frozenset[str], may_see: bool, per_kind: int) -> dict[int, CallHit]:
    """Up to ``per_kind`` + 1 calls matching ``q``, by row id: ids, keys and run ids first (exact
    identifiers), then argument values, then calls in flight; none found only by a key the
    searcher sees masked."""
    t = '"reckon_uncertain_call"'
    hits: dict[int, CallHit] = {}
    for col in ("idempotency_key", "call_id", "run_id"):
        # One statement per column, each a range of its own index that stops after a page.
        if len(hits) > per_kind:
            break
        for row in _filter(UncertainCall.objects.all(), starts(f"{t}.\"{col}\"", q, lookup=col)).order_by()[: per_kind + 1]:
            hits.setdefault(row.pk, CallHit(call=row, in_flight=row.state == UncertainCall.State.IN_FLIGHT))
    if len(hits) <= per_kind:
        if connection.vendor == "postgresql":
            arg_cond = contains(f"({t}.\"arguments\")::text", q, lookup="arguments")
        else:
            arg_cond = Q(arguments__icontains=q)
        candidates = [c for c in _first(_filter(UncertainCall.objects.all(), arg_cond).order_by(), CANDIDATES) if c.pk not in hits]
        # Values are masked wherever they occur only for a searcher who does not see them anyway.
        values = run_sensitive_values(run_ids={c.run_id for c in candidates}, fields=fields) if not may_see else frozenset()
        for row in candidates:
            paths = argument_matches(row.arguments, q, fields=fields, values=values)
            if paths:
                hits[row.pk] = CallHit(call=row, in_flight=row.state == UncertainCall.State.IN_FLIGHT, matched=[f"argument {p}" for p in paths])
            if len(hits) > per_kind:
                break
    # Calls in flight in the narrow table: by id, key or run (it keeps no arguments).
    f = '"reckon_in_flight_call"'
    flying = _filter(InFlightCall.objects.all(), starts(f"{f}.\"call_id\"", q, lookup="call_id"), starts(f"{f}.\"idempotency_key\"", q, lookup="idempotency_key"), starts(f"{f}.\"run_id\"", q, lookup="run_id"))
    by_run: dict[str, list[InFlightCall]] = {}
    for row in flying[: per_kind + 1]:
        if row.id not in hits:
            by_run.setdefault(row.run_id, []).append(row)
    for run_id, narrow in by_run.items():
        full = {r.pk: r for r in in_flight_rows(run_id, narrow)}  # as full rows, arguments included
        for row in narrow:
            hits[row.id] = CallHit(call=full.get(row.id, row), in_flight=True)
    needle = q.casefold()
    if not may_see and hits:
        # A key the searcher sees masked (a legacy key, recovery.masking) finds nothing: else
        # searching for the first digits of a guess's key would test the guess.
        masked = run_sensitive_values(run_ids={h.call.run_id for h in hits.values()}, fields=fields)
        for pk, h in list(hits.items()):
            c = h.call
            if c.idempotency_key in masked and not h.matched and not any((x or "").casefold().startswith(needle) for x in (c.call_id, c.run_id)):
                del hits[pk]
    return hits


def _calls_shown(calls: list[CallHit], q: str, sensitive: frozenset[str], may_see: bool) -> None:
    """Fill each hit's key and arguments as the searcher sees them, and what it matched by."""
    needle = q.casefold()
    all_values = run_sensitive_values(run_ids={h.call.run_id for h in calls}, fields=sensitive) if sensitive else frozenset()
    for h in calls:
        c = h.call
        h.shown_key = key_shown(c.idempotency_key or "", all_values)
        for label, text in (("call id", c.call_id), ("key", h.shown_key if not may_see else c.idempotency_key), ("run", c.run_id)):
            if (text or "").casefold().startswith(needle):
                h.matched.insert(0, label)
        args = getattr(c, "arguments", None)
        if args is None:
            h.shown_arguments = None
            continue
        shown = value_mask(args, sensitive, all_values)
        if may_see:
            # Show the sensitive values that matched (the searcher typed them); the view records them.
            for p in [m.removeprefix("argument ") for m in h.matched if m.startswith("argument ")]:
                top = p.split(".", 1)[0]
                if isinstance(shown, dict) and isinstance(args, dict) and shown.get(top) != args.get(top):
                    shown = {**shown, top: args[top]}
                    h.revealed.append(top)
        h.shown_arguments = shown


def _decisions_matching(q: str, calls: list[CallHit], per_kind: int) -> list:
    """Decisions by evidence reference, and those about the calls found: up to ``per_kind`` + 1."""
    if connection.vendor == "postgresql":
        # The type as a literal, so the partial index's condition matches even in a prepared statement.
        ev_ref = RawSQL("\"reckon_event\".\"type\" = 'approval_decided' AND UPPER(\"reckon_event\".\"payload\" ->> 'evidence_ref') LIKE UPPER(%s)", [_like(q)], output_field=BooleanField())
    else:
        ev_ref = Q(type="approval_decided", payload__evidence_ref__icontains=q)
    decisions = sorted(_first(_filter(Event.objects.all(), ev_ref).order_by(), per_kind + 1), key=lambda e: e.ts, reverse=True)
    keys = {(h.call.run_id, h.call.idempotency_key) for h in calls}
    call_ids = {(h.call.run_id, h.call.call_id) for h in calls}
    if keys and len(decisions) <= per_kind:
        seen = {(d.run_id, d.seq) for d in decisions}
        for ev in Event.objects.filter(run_id__in={r for r, _ in keys}, type__in=DECISION_TYPES).order_by("-ts")[: 10 * per_kind]:
            p = ev.payload if isinstance(ev.payload, dict) else {}
            if (ev.run_id, p.get("idempotency_key")) in keys or (ev.run_id, p.get("call_id")) in call_ids:
                if (ev.run_id, ev.seq) not in seen:
                    decisions.append(ev)
    return decisions
