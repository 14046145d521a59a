"""Console-only reads: pages of runs and events, exports, masking, charts' data.

Anything that decides what a call *is* (its risk, its state, what a decision means) belongs to the
recovery engine's selectors; these only shape stored facts for a screen or a file.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
from datetime import datetime, timedelta
from typing import Iterable, Iterator

from django.conf import settings
from django.db.models import Count, OuterRef, Q, Subquery
from django.db.models.functions import Coalesce

from access.selectors import run_access_records
from access.shown import json_shown
from django.utils import timezone

from recovery.adapters import evidence_shortened
from recovery.consequences import CallFacts, call_wording, status_words
from recovery.masking import MASK, key_shown, masked_paths, run_sensitive_values, sensitive_fields, text_mask, value_mask
from recovery.models import PolicyChange, ToolPolicy, UncertainCall
from recovery.selectors import edges_bucket, policy_for, uncertain_call_evidence, uncertain_calls_filter, unresolved_tally
from runs.events import RECORD_ONLY, EventType
from runs.fold import format_ts
from runs.models import Event, Run, RunImport
from runs.paging import CursorError, Page, cursor_decode, cursor_encode
from runs.selectors import run_state
from runs.store import events_stream

# Types that carry a person's or a rule's decision: the audit screen lists them as "who decided what".
DECISION_TYPES = (
    EventType.APPROVAL_REQUESTED.value,
    EventType.APPROVAL_DECIDED.value,
    EventType.TOOL_CALL_RESOLVED.value,
    EventType.RUN_PAUSED.value,
    EventType.RUN_RESUMED.value,
    EventType.OPERATOR_NOTE.value,
    EventType.RECONCILIATION_ATTEMPTED.value,
)
ALL_TYPES = tuple(t.value for t in EventType)
RECORD_ONLY_TYPES = frozenset(t.value for t in RECORD_ONLY)


# --- runs ------------------------------------------------------------------------------------


def run_status(run: Run, *, now) -> str:
    """A run's status in a word: finished, running (its writer holds a live lease), or stopped
    (neither: its agent went away, or the log was imported)."""
    if run.finished_seq:
        return "finished"
    if run.lease_holder and run.lease_expires_at is not None and run.lease_expires_at > now:
        return "running"
    return "stopped"


def runs_open_calls(run_ids: Iterable[str]) -> dict[str, dict[str, int]]:
    """Per run: how many of its calls are in doubt (``open``: open, reconciling, escalated) and how
    many are in flight (``in_flight``, in either table)."""
    from recovery.models import UNRESOLVED_STATES, InFlightCall

    ids = list(set(run_ids))
    out = {r: {"open": 0, "in_flight": 0} for r in ids}
    for run_id, state, n in UncertainCall.objects.filter(run_id__in=ids).exclude(state=UncertainCall.State.RESOLVED).values_list("run_id", "state").annotate(n=Count("id")).order_by():
        out[run_id]["open" if state in UNRESOLVED_STATES else "in_flight"] += n
    for run_id, n in InFlightCall.objects.filter(run_id__in=ids).values_list("run_id").annotate(n=Count("id")).order_by():
        out[run_id]["in_flight"] += n
    return out


def _activity():
    """A run's latest activity: its last event's own time (the run's creation when it has none)."""
    last = Event.objects.filter(run_id=OuterRef("run_id"), seq=OuterRef("last_seq")).values("ts")[:1]
    return Coalesce(Subquery(last), "created_at")


def runs_page(*, q: str = "", after: str | None = None, limit: int = 50, now=None) -> Page:
    """Runs by latest activity, most recent first (keyset: ``after`` is the cursor of the last run
    shown), optionally those whose id contains ``q``; each with ``activity``, ``status`` and
    ``calls`` (``runs_open_calls``). ValueError names a cursor this list did not give."""
    from django.utils import timezone as djtz

    now = now or djtz.now()
    qs = Run.objects.only("run_id", "origin", "created_at", "last_seq", "finished_seq", "lease_holder", "lease_expires_at").annotate(activity=_activity())
    if q:
        qs = qs.filter(run_id__icontains=q)
    if after:
        try:
            at, run_id = cursor_decode(after, (datetime, str))
        except CursorError as exc:
            raise ValueError(f"after must be a cursor from the runs list's links ({exc}), got {after[:80]!r}") from None
        qs = qs.filter(Q(activity__lt=at) | Q(activity=at, run_id__lt=run_id))
    rows = list(qs.order_by("-activity", "-run_id")[: limit + 1])
    more = len(rows) > limit
    rows = rows[:limit]
    calls = runs_open_calls(r.run_id for r in rows)
    for r in rows:
        r.status = run_status(r, now=now)
        r.calls = calls.get(r.run_id, {"open": 0, "in_flight": 0})
    return Page(rows, cursor_encode(rows[-1].activity, rows[-1].run_id) if more else None)


def run_calls(*, run_id: str) -> list:
    """The run's calls that are or were uncertain, and those in flight, oldest first: the run
    screen links each to its own screen."""
    from recovery.models import InFlightCall
    from recovery.projection import in_flight_rows

    rows = list(UncertainCall.objects.filter(run_id=run_id).order_by("start_seq"))
    rows += in_flight_rows(run_id, list(InFlightCall.objects.filter(run_id=run_id)))
    return sorted(rows, key=lambda r: r.start_seq)


def run_events_page(*, run_id: str, types: Iterable[str] = (), before: int | None = None, limit: int = 100) -> Page:
    """The run's stored events newest first, ``seq < before``, of the given types (all when empty).

    Long runs are read from the newest end so the first screen costs one index range scan on
    (run, seq) however long the run is; "load older" passes the last seq shown as ``before``.
    """
    qs = Event.objects.filter(run_id=run_id).order_by("-seq").only("seq", "type", "v", "ts", "payload", "recorded_at", "epoch")
    types = [t for t in types if t]
    if types:
        qs = qs.filter(type__in=types)
    if before is not None:
        qs = qs.filter(seq__lt=before)
    rows = list(qs[: limit + 1])
    more = len(rows) > limit
    rows = rows[:limit]
    # Events written under an importer's epoch arrived by import (runs.models.RunImport).
    imported = set(RunImport.objects.filter(run_id=run_id).values_list("epoch", flat=True)) if rows else set()
    for e in rows:
        e.imported = e.epoch in imported
    return Page(rows, rows[-1].seq if more and rows else None)


def run_decisions(*, run_id: str, limit: int = 200) -> list[Event]:
    """Who decided what and why in this run: approvals, resolutions, notes, pauses, attempts, oldest first."""
    return list(Event.objects.filter(run_id=run_id, type__in=DECISION_TYPES).order_by("seq")[:limit])


def run_type_counts(*, run_id: str) -> dict[str, int]:
    return dict(Event.objects.filter(run_id=run_id).values_list("type").annotate(n=Count("seq")).order_by("type"))


# --- export ----------------------------------------------------------------------------------


def _export_rows(*, run_id: str, upto: int):
    # The events as stored, one (run, seq) range of RECKON_READ_CHUNK at a time: the run is never
    # all in memory, and the first chunk leaves before the next is read. (Not a server-side cursor:
    # outside a transaction Django declares it WITH HOLD, which has PostgreSQL materialise the
    # whole result before the first row comes back.)
    for seq, type_, payload, ts, v in events_stream(run_id=run_id, upto=upto, upcast=False):
        yield seq, type_, ts, payload, v


def run_export_lines(*, run_id: str, fields: frozenset[str], upto: int) -> Iterator[dict]:
    """The run's events seq 1..``upto`` as run log lines (docs/formats.md) (``v`` only when not 1),
    masked by ``fields`` and by the run's sensitive values wherever they occur."""
    values = run_sensitive_values(run_ids=[run_id], fields=fields)
    for seq, type_, ts, payload, v in _export_rows(run_id=run_id, upto=upto):
        doc = {"seq": seq, "type": type_, "ts": format_ts(ts), "payload": value_mask(payload, fields, values)}
        if v != 1:
            doc["v"] = v
        yield doc


EXPORT_FORMATS = ("jsonl", "csv")


def run_export_chunks(*, run_id: str, fmt: str, fields: frozenset[str], upto: int) -> Iterator[bytes]:
    """The export file of seq 1..``upto``, as UTF-8 pieces of about ``RECKON_READ_CHUNK`` events
    each, for a streamed answer. ``fmt`` is ``jsonl`` or ``csv``. The same arguments give the same
    bytes for as long as the masking rules do not change (events up to ``upto`` never change), which
    is what lets the digest be computed again, later, by ``run_export_digest``.

    JSONL is the reference log format itself, so an unmasked export imports again unchanged; CSV has
    one row per event with the payload as a JSON cell, for spreadsheets.
    """
    if fmt not in EXPORT_FORMATS:
        raise ValueError(f"export format {fmt!r} is not one of jsonl, csv")
    size = settings.RECKON_READ_CHUNK
    buf = io.StringIO(newline="")
    if fmt == "csv":
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(["seq", "type", "ts", "v", "record_only", "payload"])
    n = 0
    for d in run_export_lines(run_id=run_id, fields=fields, upto=upto):
        if fmt == "jsonl":
            buf.write(json.dumps(d, ensure_ascii=False, separators=(", ", ": ")) + "\n")
        else:
            w.writerow([d["seq"], d["type"], d["ts"], d.get("v", 1), "yes" if d["type"] in RECORD_ONLY_TYPES else "no", json.dumps(d["payload"], ensure_ascii=False, sort_keys=True)])
        n += 1
        if n % size == 0:
            yield buf.getvalue().encode("utf-8")
            buf.seek(0)
            buf.truncate()
    if buf.tell():
        yield buf.getvalue().encode("utf-8")


def run_export_digest(*, run_id: str, fmt: str, fields: frozenset[str], upto: int) -> str:
    """The sha256 hex digest of ``run_export_chunks`` with these arguments, computed as it streams."""
    h = hashlib.sha256()
    for piece in run_export_chunks(run_id=run_id, fmt=fmt, fields=fields, upto=upto):
        h.update(piece)
    return h.hexdigest()


def run_export_discloses(*, run_id: str, fields: frozenset[str], upto: int) -> bool:
    """Whether the export masked by ``fields`` shows any sensitive value: it does when some event
    masked so differs from the same event fully masked. Decided before the first byte leaves, one
    event at a time (it stops at the first difference): a masked export, or a run without
    sensitive values, reads the run once and discloses nothing to record."""
    full = sensitive_fields()
    if not full or fields >= full:
        return False
    mine = run_sensitive_values(run_ids=[run_id], fields=fields)
    every = run_sensitive_values(run_ids=[run_id], fields=full)
    return any(value_mask(payload, fields, mine) != value_mask(payload, full, every) for _, _, _, payload, _ in _export_rows(run_id=run_id, upto=upto))


# --- charts (overview) -----------------------------------------------------------------------

AGE_BUCKETS = ((0, 300, "< 5 min"), (300, 900, "5–15 min"), (900, 3600, "15 min–1 h"), (3600, 14400, "1–4 h"), (14400, 86400, "4–24 h"), (86400, None, "> 1 day"))


def chart_instants(*, now, hours: int = 24, points: int = 25) -> list:
    """The instants the 24-hour chart samples, oldest first, the last one ``now``."""
    step = timedelta(hours=hours) / (points - 1)
    return [now - step * (points - 1 - i) for i in range(points)]


def age_edges(*, now) -> list:
    """The boundaries of ``AGE_BUCKETS`` as instants, ascending (oldest boundary first)."""
    return sorted(now - timedelta(seconds=lo) for lo, _, _ in AGE_BUCKETS)


def overview_tally(*, now) -> list[dict]:
    """The one scan of unresolved calls the overview needs: by risk class, chart bucket and age bucket."""
    return unresolved_tally(edges=(chart_instants(now=now), age_edges(now=now)))


def open_calls_over_time(*, now, hours: int = 24, points: int = 25, tally: list[dict] | None = None) -> tuple[list[str], dict[str, list[int]]]:
    """How many uncertain calls were open at each of ``points`` instants over the last ``hours``, by risk class.

    A call counts as open at t when it started at or before t and was not yet resolved; both times
    are the timestamps of the call's own events (its start's and its resolution's ``ts``), never
    when they were stored, so a call imported today that was settled in September is not drawn as
    open today. Each call is open over a run of consecutive instants, from the first at or
    after its start to the last before its resolution; counting calls by those two bucket numbers
    (one GROUP BY each for unresolved and recently resolved calls) and summing the differences
    gives the curve without evaluating every instant against every call. ``tally`` is an
    ``overview_tally`` made with the same ``now`` and the default hours and points.
    """
    instants = chart_instants(now=now, hours=hours, points=points)
    if tally is None:
        tally = unresolved_tally(edges=(instants,))
    classes = list(UncertainCall.Risk.values)
    diff = {c: [0] * (points + 1) for c in classes}
    for t in tally:
        diff[t["risk_class"]][t["buckets"][0]] += t["n"]  # open from its first instant to the end
    resolved = (
        UncertainCall.objects.filter(state=UncertainCall.State.RESOLVED, resolved_at__gt=instants[0], started_at__lte=now)
        .annotate(s=edges_bucket("started_at", instants), e=edges_bucket("resolved_at", instants))
        .values("risk_class", "s", "e")
        .annotate(n=Count("id"))
        .order_by()
    )
    for r in resolved:
        if r["s"] < r["e"]:
            diff[r["risk_class"]][r["s"]] += r["n"]
            diff[r["risk_class"]][r["e"]] -= r["n"]
    series = {}
    for c in classes:
        running, values = 0, []
        for i in range(points):
            running += diff[c][i]
            values.append(running)
        series[c] = values
    return [t.strftime("%H:%M") for t in instants], series


def open_calls_age_histogram(*, now, tally: list[dict] | None = None) -> list[tuple[str, int]]:
    """Unresolved uncertain calls by age since their start, in fixed buckets.

    ``tally`` is an ``overview_tally`` made with the same ``now`` (its second bucket is the age);
    without one, this makes its own scan.
    """
    if tally is None:
        tally = [{**t, "buckets": (None, t["buckets"][0])} for t in unresolved_tally(edges=(age_edges(now=now),))]
    counts = [0] * len(AGE_BUCKETS)
    last = len(AGE_BUCKETS) - 1
    for t in tally:
        k = t["buckets"][1]  # how many boundaries, oldest first, lie before the start
        if k <= last:  # a start after ``now`` has no age yet
            counts[last - k] += t["n"]
    return [(label, counts[i]) for i, (_, _, label) in enumerate(AGE_BUCKETS)]


def call_notes(*, history: list[dict]) -> list[dict]:
    """The people's notes among a call's history (claims and assignments are shown elsewhere)."""
    return [h for h in history if h["type"] == "operator_note" and h["payload"].get("action", "note") == "note"]


def comparison_rows(evidence: dict | None) -> list[dict]:
    """The field-by-field comparison of a lookup's evidence as rows: field, intended, observed, equal."""
    comp = (evidence or {}).get("comparison") or {}
    return [{"field": f, "intended": c.get("expected"), "observed": c.get("observed"), "equal": bool(c.get("equal"))} for f, c in comp.items()]


# --- screen data, masked: what a view renders ----------------------------------------------------
#
# Each function returns what its screen shows with sensitive fields already masked (``fields``:
# the names to mask, from access.masking for the person asking, or every sensitive field where the
# screen offers "reveal" instead). Views check access, parse input and render; they never mask.


def events_shown(events: list, fields: frozenset[str], values: frozenset[str] | None = None) -> list:
    """Attach the masked payload (``shown``) and the paths a reveal may name (``masked``) to each event.

    ``values``: the sensitive values to mask wherever they occur; by default those of the events' runs.
    """
    if values is None:
        values = run_sensitive_values(run_ids={e.run_id for e in events}, fields=fields)
    for e in events:
        e.shown = value_mask(e.payload, fields, values)
        e.masked = masked_paths(e.payload, fields)
        e.brief = payload_brief(e.shown)
        e.pretty, e.cut = json_shown(e.shown)  # a long payload is cut; its whole JSON has its own link
    return events


def run_event_shown(*, run_id: str, seq: int, fields: frozenset[str]) -> Event | None:
    """One event of the run with its payload masked as the run screen masks it, or None."""
    event = Event.objects.filter(run_id=run_id, seq=seq).first()
    return events_shown([event], fields)[0] if event is not None else None


# The entries a folded payload's one line names first: what was decided or found, and by whom.
BRIEF_FIRST = ("decision", "disposition", "outcome", "action", "by", "rule", "name", "call_id", "reason", "text", "content")


def payload_brief(payload, limit: int = 160) -> str:
    """A payload in one line for its folded view: the telling entries first, then the rest, cut at ``limit``."""
    if not isinstance(payload, dict):
        return "" if payload is None else str(payload)[:limit]
    keys = [k for k in BRIEF_FIRST if k in payload] + [k for k in payload if k not in BRIEF_FIRST]
    text = ", ".join(f"{k}={payload[k] if not isinstance(payload[k], (dict, list)) else '…'}" for k in keys)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def run_timeline(*, run_id: str, types: Iterable[str], before: int | None, fields: frozenset[str], limit: int = 100, values: frozenset[str] | None = None) -> Page:
    page = run_events_page(run_id=run_id, types=types, before=before, limit=limit)
    events_shown(page.items, fields, run_sensitive_values(run_ids=[run_id], fields=fields) if values is None else values)
    return page


def run_stale_observations(*, run_id: str) -> list[dict]:
    """Each resumption that found stale observations (completed reads older than their tool's
    fresh_for, read again by the agent as new operations), oldest first: {seq, ts, observations}."""
    rows = Event.objects.filter(run_id=run_id, type=EventType.RUN_RESUMED.value).order_by("seq").values_list("seq", "ts", "payload")
    return [{"seq": seq, "ts": ts, "observations": p["stale_observations"]} for seq, ts, p in rows if p.get("stale_observations")]


def overdue_keys_shown(rows: list[dict], fields: frozenset[str]) -> list[dict]:
    """The overview's overdue calls with each key as ``fields`` lets it be seen (``key_shown``):
    the screen shows a key's first digits, which test guesses as well as the whole key does."""
    values = run_sensitive_values(run_ids={r["run_id"] for r in rows}, fields=fields) if rows else frozenset()
    return [{**r, "idempotency_key": key_shown(r["idempotency_key"], values)} for r in rows]


def run_audit(*, run_id: str, fields: frozenset[str]) -> dict:
    """The run screen's audit panels: counts by type, who decided what, and who was shown its
    sensitive values unmasked (the access record, newest first)."""
    values = run_sensitive_values(run_ids=[run_id], fields=fields)
    reveals = run_access_records(run_id=run_id)
    for r in reveals:
        # A record written before records were masked (access.services) may hold a value in its reason or paths.
        r.shown_why, r.shown_what = text_mask(r.why, values), text_mask(r.what(), values)
    return {
        "type_counts": sorted(run_type_counts(run_id=run_id).items()),
        "decisions": events_shown(run_decisions(run_id=run_id), fields, values),
        "reveals": reveals,
    }


def run_state_shown(*, run: Run, at: int, fields: frozenset[str]) -> tuple[dict | None, str | None]:
    """The run's folded state after ``at``, masked, or why there is none."""
    if at > run.last_seq:
        return None, f"seq {at} is past the run's last event ({run.last_seq})"
    values = run_sensitive_values(run_ids=[run.run_id], fields=fields)
    return value_mask(run_state(run_id=run.run_id, at=at).to_dict(), fields, values), None


def queue_shown(page: Page, fields: frozenset[str]) -> Page:
    values = run_sensitive_values(run_ids={row.run_id for row in page.items}, fields=fields)
    for row in page.items:
        row.shown_arguments = value_mask(row.arguments, fields, values)
    return page


def calls_by_ids(ids: list[int]) -> list[UncertainCall]:
    by_pk = UncertainCall.objects.in_bulk(ids)
    return [by_pk[i] for i in ids if i in by_pk]


def calls_matching(filters: dict, *, limit: int) -> list[UncertainCall]:
    """Every call the queue's filter matches, page by page, up to ``limit``."""
    rows, after = [], None
    while len(rows) < limit:
        page = uncertain_calls_filter(**filters, after=after, limit=200)
        rows.extend(page.items)
        if page.next_cursor is None:
            break
        after = page.next_cursor
    return rows[:limit]


def _attempt_shown(a: dict, fields: frozenset[str], values: frozenset[str]) -> dict:
    return {
        **a,
        "shown_evidence": evidence_shortened(value_mask(a["evidence"], fields, values)),
        "shown_error": value_mask(a["error"], fields, values),  # an error may quote the receiver's JSON
        "shown_rule": value_mask(a.get("rule"), fields, values),
        "comparison": [
            {
                **r,
                "intended": MASK if r["field"] in fields else value_mask(r["intended"], fields, values),
                "observed": MASK if r["field"] in fields else value_mask(r["observed"], fields, values),
                "masked": r["field"] in fields,
            }
            for r in comparison_rows(a["evidence"])
        ],
    }


def call_facts(*, call: UncertainCall, policy, conflict: dict | None, arguments: dict, now=None) -> CallFacts:
    """The facts the approval screen's words are computed from (recovery.consequences)."""
    return CallFacts(
        now=now or timezone.now(),
        tool=call.tool,
        state=call.state,
        started_at=call.started_at,
        idempotency_key=call.idempotency_key,
        deadline=call.deadline,
        key_retention_s=policy.key_retention_s,
        retry_window_closes_at=call.retry_window_closes_at,
        honours_keys=policy.strategy == "provider_idempotency",
        has_lookup=policy.lookup is not None,
        has_execute=policy.execute is not None,
        has_compensate=policy.compensate is not None,
        last_outcome=call.last_outcome,
        differing_fields=tuple(r["field"] for r in (conflict or {}).get("comparison", []) if not r["equal"]),
        possible_duplicate=call.possible_duplicate,
        arguments=arguments,
        amount_field=policy.amount_field,
        currency_field=policy.currency_field,
        target_field=policy.target_field,
    )


def call_screen(*, pk: int, fields: frozenset[str]) -> dict:
    """Everything the approval screen shows about one call, masked: its payload, start time, key and
    last error, every reconciliation attempt with its evidence, the run's recent events, and why a
    person may not decide it now (``not_decidable``). CallNotFound for an unknown call."""
    ev = uncertain_call_evidence(pk=pk)
    call = ev["call"]
    policy = policy_for(call.tool)
    # The run's sensitive values, its calls' arguments and what lookups observed, masked anywhere.
    values = run_sensitive_values(run_ids=[call.run_id], fields=fields)
    attempts = [_attempt_shown(a, fields, values) for a in ev["attempts"]]
    history = [{**h, "shown": value_mask(h["payload"], fields, values)} for h in ev["history"]]
    arguments = call.arguments if isinstance(call.arguments, dict) else {"(arguments)": call.arguments}
    shown_arguments = [(k, MASK if k in fields and v is not None else value_mask(v, fields, values), k in fields and v is not None) for k, v in arguments.items()]
    conflict = next((a for a in reversed(attempts) if a["outcome"] == "conflict"), None)
    return {
        "call": call,
        "key": key_shown(call.idempotency_key, values),  # a legacy key of a call with a sensitive argument is masked
        "last_error": value_mask(call.last_error, fields, values),
        "resolved_by": value_mask(call.resolved_by, fields, values),  # a rule's text may quote an adapter's error
        "policy": policy,
        "attempts": attempts,
        "conflict": conflict,
        "history": history,
        "notes": call_notes(history=history),
        "arguments": shown_arguments,
        "status_words": status_words(state=call.state, disposition=call.disposition, resolved_by=value_mask(call.resolved_by, fields, values), automatic=call.resolution_kind == "automatic", escalation_reason=call.escalation_reason),
        "wording": call_wording(call_facts(call=call, policy=policy, conflict=conflict, arguments={k: v for k, v, _ in shown_arguments})),
        "recent": run_timeline(run_id=call.run_id, types=(), before=None, fields=fields, limit=12, values=values).items,
        # shown in place of the form: decision_record refuses with it (it may quote a rule's text)
        "not_decidable": value_mask(call.decidable(), fields, values),
        "has_execute": policy.execute is not None,
        "has_compensate": policy.compensate is not None,
    }


def policies_screen() -> dict:
    return {"policies": ToolPolicy.objects.order_by("tool"), "changes": PolicyChange.objects.order_by("-at", "-id")[:30]}
