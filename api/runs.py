"""Runs over HTTP: leases, the fenced append, events by page, runs and their folded state.

Thin callers of ``runs.leases``, ``runs.store``, ``runs.selectors`` and ``runs.snapshots``: every
rule lives there (the run list's filters and keyset pages in ``runs.selectors.runs_filter``, with
the caller's tenant visibility from ``access.tenancy`` passed in as its scope). The
domain errors those raise are mapped to statuses once, in api/errors.py: a stale epoch, a seq
conflict or a second finish is a 409 carrying the run's current epoch and last seq, so an agent can
tell "someone else owns this run now" from "I lost track of my own seq" without another request.

A token limited to tenants sees only runs whose every tenant is one of its own (access.tenancy);
any other run answers 404, exactly like a run that does not exist.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Literal

import orjson
from django.http import HttpRequest
from ninja import Field, Query, Router, Schema, Status
from pydantic import BaseModel

from access.masking import mask_fields, masked
from access.services import Shown, run_writer_note, unmasked_reads_record
from access.tenancy import runs_visible
from access.tokens import Principal
from api.auth import caller
from api.errors import Conflicted, Forbidden, Unprocessable
from api.schemas import clean_name, request_route, require_tenants, responses
from recovery.masking import run_sensitive_values
from runs.errors import RunNotFound
from runs.events import CURRENT_SCHEMA_VERSION, agent_events_check
from runs.fold import Event
from runs.freshness import stale_observations
from runs.identity import KEY_SECRET_FIELD
from runs.leases import Lease, lease_acquire, lease_owner_check, lease_release, lease_renew
from runs.models import Run
from runs.paging import CursorError, cursor_decode, cursor_encode
from runs.selectors import run_state, runs_filter
from runs.snapshots import run_state_fast
from runs.store import NewEvent, events_append, events_stream
from runs.tenants import run_tenant_claim, run_tenants, tenants_named

router = Router(tags=["runs"])

BIG = 2**53  # the largest whole number every JSON client reads exactly
RUN_ID = Field(..., min_length=1, max_length=200)


# --- schemas ---------------------------------------------------------------------------------


class LeaseAcquireIn(Schema):
    holder: str = Field(..., min_length=1, max_length=200, description="who holds the lease, e.g. host:pid")
    ttl_seconds: float | None = Field(None, gt=0, le=86400, description="lease length; default RECKON_LEASE_SECONDS")
    tenant: str | None = Field(None, min_length=1, max_length=200, description="the tenant a new run belongs to")


class LeaseRenewIn(Schema):
    epoch: int = Field(..., ge=0, le=BIG)
    ttl_seconds: float | None = Field(None, gt=0, le=86400)


class LeaseReleaseIn(Schema):
    epoch: int = Field(..., ge=0, le=BIG)


class LeaseOut(Schema):
    run_id: str
    epoch: int
    holder: str
    expires_at: datetime
    last_seq: int


# EventIn and AppendIn are plain pydantic models: ninja's Schema adds a root validator (for
# reading Django objects) that runs per event and costs more than the rest of the validation of a
# 100-event batch. The documented shape is the same.
class EventIn(BaseModel):
    type: str = Field(..., min_length=1, max_length=64)
    payload: dict[str, Any]
    ts: datetime | None = Field(None, description="when it happened (RFC 3339); default: now")
    v: int = Field(CURRENT_SCHEMA_VERSION, ge=1, le=1000, description="schema version of the payload")


class AppendIn(BaseModel):
    epoch: int = Field(..., ge=0, le=BIG, description="the lease epoch the writer holds")
    expected_seq: int = Field(..., ge=0, le=BIG, description="the run's last seq as the writer knows it")
    events: list[EventIn] = Field(..., min_length=1, max_length=1000)


class AppendOut(Schema):
    run_id: str
    epoch: int
    first_seq: int
    last_seq: int
    key_secret: str | None = Field(None, description="when the batch began the run (run_started at seq 1): the run's key secret, for the agent to compute its idempotency keys with")


class EventOut(Schema):
    seq: int
    type: str
    v: int
    ts: datetime | None
    payload: dict[str, Any]


class EventPage(Schema):
    run_id: str
    last_seq: int
    events: list[EventOut]
    next_after: int | None = Field(None, description="pass as ?after= for the next page; null on the last page")


class RunOut(Schema):
    run_id: str
    origin: str
    source_file: str
    created_at: datetime
    last_seq: int
    finished: bool
    finished_seq: int | None
    lease_epoch: int | None = Field(None, description="the lease's epoch, for the caller that acquired it; null for everyone else")
    lease_holder: str
    lease_expires_at: datetime | None
    tenants: list[str]


class RunPage(Schema):
    runs: list[RunOut]
    next_cursor: str | None = Field(None, description="pass as ?cursor= for the next page")


class RunStateOut(Schema):
    run_id: str
    last_seq: int
    status: str
    outcome: Any = None
    turns: int
    usage: dict[str, Any]
    cost_usd: float
    compactions: int
    messages: list[dict[str, Any]]
    trajectory: list[str]
    completed_calls: dict[str, Any]
    uncertain_calls: list[dict[str, Any]]
    pending_approvals: dict[str, Any]
    memory: dict[str, Any]
    resumptions: int
    resolutions: dict[str, str]
    key_secret: str | None = Field(
        None,
        description="the run's key secret (schema version 3), for the run's agents to compute its idempotency keys on resume; masked for every caller without the append scope, null for older runs",
    )
    stale_observations: list[dict[str, Any]] = Field(
        default_factory=list,
        description="completed reads older than their tool's fresh_for now (schema version 4): a resuming agent reads them again as new operations; each {idempotency_key, name, call_id, seq, completed_at, fresh_for_s}. Empty for a past seq (at=...)",
    )


class RunFilters(Schema):
    origin: Literal["live", "import"] | None = None
    finished: bool | None = None
    leased: bool | None = Field(None, description="true: someone holds the lease now (by its expiry)")
    tenant: str | None = Field(None, min_length=1, max_length=200)
    run_id_prefix: str | None = Field(None, min_length=1, max_length=200)
    limit: int = Field(50, ge=1, le=500)
    cursor: str | None = Field(None, max_length=600)


# --- helpers -----------------------------------------------------------------------------------


def _visible_run(principal: Principal, run_id: str) -> Run:
    """The run, or 404 when it does not exist or lies outside the caller's tenants."""
    clean_name(run_id, "run id")
    run = Run.objects.filter(run_id=run_id).first()
    if run is None or not principal.may_see_run(run_id):
        raise RunNotFound(run_id)
    return run


def _lease_out(lease: Lease) -> dict:
    return {"run_id": lease.run_id, "epoch": lease.epoch, "holder": lease.holder, "expires_at": lease.expires_at, "last_seq": lease.last_seq}


def _utc(ts: datetime | None, where: str) -> datetime | None:
    if ts is None:
        return None
    try:
        return ts.replace(tzinfo=timezone.utc) if ts.tzinfo is None else ts.astimezone(timezone.utc)
    except (OverflowError, ValueError):
        raise Unprocessable(f"{where}: timestamp {ts.isoformat()} is out of range") from None


def _run_out(run: Run, tenants: set[str], principal: Principal) -> dict:
    return {
        "run_id": run.run_id,
        "origin": run.origin,
        "source_file": run.source_file,
        "created_at": run.created_at,
        "last_seq": run.last_seq,
        "finished": run.finished_seq is not None,
        "finished_seq": run.finished_seq,
        "lease_epoch": run.lease_epoch if run.lease_owner == principal.owner else None,
        "lease_holder": run.lease_holder,
        "lease_expires_at": run.lease_expires_at,
        "tenants": sorted(tenants),
    }


def _cursor_encode(run: Run) -> str:
    return cursor_encode(run.created_at, run.run_id)


def _cursor_decode(cursor: str) -> tuple[datetime, str]:
    try:
        return cursor_decode(cursor, (datetime, str))
    except CursorError as exc:
        raise Unprocessable(f"cursor is not one this API returned ({exc})") from None


# --- leases ------------------------------------------------------------------------------------


@router.post("/runs/{run_id}/lease", response=responses({200: LeaseOut}), auth=caller("append"), summary="Acquire a run's lease")
def lease_acquire_view(request: HttpRequest, run_id: str, body: LeaseAcquireIn):
    """Take the run's lease with a new epoch, creating the run if it does not exist yet; the lease
    belongs to the caller (token or person) from now on. 409 ``lease_held`` while another holder's
    lease is live, naming the holder, who acquired it and until when (never its epoch); 409
    ``run_imported`` for a run imported from a file."""
    principal: Principal = request.auth
    clean_name(run_id, "run id")
    clean_name(body.holder, "holder")
    tenant = clean_name(body.tenant, "tenant") if body.tenant else None
    existing = Run.objects.filter(run_id=run_id).first()
    exists = existing is not None
    if exists:
        _visible_run(principal, run_id)
        if existing.origin == Run.Origin.IMPORT:
            # An imported log is history: Reckon itself writes its recovery facts under its own
            # lease, and no agent continues it (nor takes its lease to read it back unrecorded).
            raise Conflicted(f"run {run_id!r} was imported from a file: its log is history, and no agent takes its lease", code="run_imported")
    else:
        if tenant is None and principal.tenants is not None:
            if len(principal.tenants) != 1:
                raise Unprocessable("this token serves several tenants: name the new run's tenant in 'tenant'")
            tenant = next(iter(principal.tenants))
        if tenant is not None:
            require_tenants(principal, {tenant}, "the new run")
    lease = lease_acquire(run_id=run_id, holder=body.holder, ttl_seconds=body.ttl_seconds, owner=principal.owner)
    if not exists and tenant is not None:
        run_tenant_claim(run_id=run_id, tenant=tenant)
    if not exists:
        # The token whose lease began the run is its writer: reading the run back is no disclosure.
        # Taking the lease of a run someone else began makes no token its writer (access.services).
        run_writer_note(who=principal, run_id=run_id)
    return _lease_out(lease)


@router.post("/runs/{run_id}/lease/renew", response=responses({200: LeaseOut}), auth=caller("append"), summary="Renew a run's lease")
def lease_renew_view(request: HttpRequest, run_id: str, body: LeaseRenewIn):
    """Extend the lease of ``epoch`` from now; 409 ``stale_epoch`` if it is no longer current, 409
    ``lease_held`` if someone else acquired it."""
    _visible_run(request.auth, run_id)
    lease_owner_check(run_id=run_id, epoch=body.epoch, owner=request.auth.owner)
    return _lease_out(lease_renew(run_id=run_id, epoch=body.epoch, ttl_seconds=body.ttl_seconds))


@router.post("/runs/{run_id}/lease/release", response=responses({204: None}), auth=caller("append"), summary="Release a run's lease")
def lease_release_view(request: HttpRequest, run_id: str, body: LeaseReleaseIn):
    """Give the lease up so the next writer need not wait for it to expire; 409 ``lease_held`` if
    someone else acquired it."""
    _visible_run(request.auth, run_id)
    lease_owner_check(run_id=run_id, epoch=body.epoch, owner=request.auth.owner)
    lease_release(run_id=run_id, epoch=body.epoch)
    return Status(204, None)


# --- events ------------------------------------------------------------------------------------


@router.post("/runs/{run_id}/events", response=responses({201: AppendOut}), auth=caller("append"), summary="Append events (fenced)", exclude_none=True)
def events_append_view(request: HttpRequest, run_id: str, body: AppendIn):
    """Append a batch of events as seqs ``expected_seq + 1 ...``, all or none, under lease ``epoch``.

    403 for an event of a type agents do not write (a person's decision, claim or note, or one of
    Reckon's recovery facts: runs.events.WRITER), naming it; 409 on a stale epoch, a seq conflict or a second ``run_finished``, with ``last_seq`` (and
    ``current_epoch`` when the caller holds it); 409 ``lease_held`` under an epoch someone else
    acquired; 422 for an event the store cannot hold (unknown type, missing field, bad version).
    """
    principal: Principal = request.auth
    if principal.tenants is None:
        clean_name(run_id, "run id")  # the append itself answers RunNotFound: no extra query
    else:
        _visible_run(principal, run_id)
    # Agents write agent facts: a person's decision, claim or note, or Reckon's own recovery fact,
    # is refused with 403 naming its type (runs.events.WRITER).
    agent_events_check((e.type, e.payload) for e in body.events)
    # The lease is its owner's: one primary-key read of the run row per request, not per event.
    lease_owner_check(run_id=run_id, epoch=body.epoch, owner=principal.owner)
    events = [NewEvent(e.type, e.payload, _utc(e.ts, f"event {i}"), e.v) for i, e in enumerate(body.events)]
    if principal.tenants is not None:
        named = tenants_named(run_id, [Event(0, e.type, e.payload, e.ts, e.v) for e in events if e.v <= CURRENT_SCHEMA_VERSION])
        require_tenants(principal, named, "an event in this batch")
        _require_argument_tenants(principal, events)
    appended = events_append(run_id=run_id, epoch=body.epoch, expected_seq=body.expected_seq, events=events)
    out = {"run_id": run_id, "epoch": body.epoch, "first_seq": appended[0].seq, "last_seq": appended[-1].seq}
    if appended[0].seq == 1:
        # The store filled in the run's key secret; the writer (an append token) needs it for its keys.
        out["key_secret"] = appended[0].payload.get(KEY_SECRET_FIELD)
    return Status(201, out)


# The payload bytes an event page holds at most (one event more when a single one is larger): a
# page of 1,000 events at RECKON_MAX_EVENT_BYTES would otherwise be 256 MB. Read in small ranges,
# so memory holds a page, not ``limit`` events of the largest size.
PAGE_BYTES = 4 << 20
_PAGE_READ = 32


def _events_bounded(run_id: str, after: int, upto: int) -> list[Event]:
    events, total = [], 0
    for e in events_stream(run_id=run_id, after=after, upto=upto, chunk=_PAGE_READ):
        size = len(orjson.dumps(e.payload, option=orjson.OPT_NON_STR_KEYS))
        if events and total + size > PAGE_BYTES:
            break
        events.append(e)
        total += size
    return events


def _require_argument_tenants(principal: Principal, events: list[NewEvent]) -> None:
    """403 when a call's arguments name a tenant outside the token's, naming both tenants (the
    store refuses any other mismatch between the two with 422, for every writer)."""
    for i, e in enumerate(events):
        args = e.payload.get("arguments") if e.type == "tool_call_started" and isinstance(e.payload, dict) else None
        named = args.get("tenant") if isinstance(args, dict) else None
        if isinstance(named, str) and not principal.may_see({named}):
            filed = e.payload.get("tenant", named)
            raise Forbidden(f"event {i}: the call is filed under tenant {filed!r} but its arguments name tenant {named!r}, which this token may not touch")


@router.get("/runs/{run_id}/events", response=responses({200: EventPage}), auth=caller("read"), summary="Read a run's events by page")
def events_page_view(
    request: HttpRequest,
    run_id: str,
    after: int = Query(0, ge=0, le=BIG, description="return events with seq > after"),
    limit: int = Query(100, ge=1, le=1000),
):
    """Events in seq order, read as the current schema version (older events are upcast on read).
    A page ends after ``limit`` events or once its payloads reach ``PAGE_BYTES`` (at least one
    event), whichever comes first: ``next_after`` says where the next one starts."""
    run = _visible_run(request.auth, run_id)
    upto = min(after + limit, run.last_seq)
    events = _events_bounded(run_id, after, upto) if after < upto else []
    upto = events[-1].seq if events else upto
    mask = mask_fields(request.auth)
    values = run_sensitive_values(run_ids=[run_id], fields=mask)
    shown = [{"seq": e.seq, "type": e.type, "v": e.v, "ts": e.ts, "payload": masked(e.payload, mask, values)} for e in events]
    # Recorded before the answer leaves, when it shows sensitive values unmasked (access.services).
    unmasked_reads_record(who=request.auth, mask=mask, route=request_route(request), shown=[Shown(run_id, {str(e["seq"]): e["payload"] for e in shown}, prefix="event ")])
    return {"run_id": run_id, "last_seq": run.last_seq, "events": shown, "next_after": upto if upto < run.last_seq else None}


# --- runs ----------------------------------------------------------------------------------------


@router.get("/runs", response=responses({200: RunPage}), auth=caller("read"), summary="List runs")
def runs_list_view(request: HttpRequest, filters: Query[RunFilters]):
    """Runs, newest first, with filters; keyset pagination through ``next_cursor``."""
    principal: Principal = request.auth
    page = runs_filter(
        origin=filters.origin,
        finished=filters.finished,
        leased=filters.leased,
        tenant=filters.tenant,
        run_id_prefix=filters.run_id_prefix,
        after=_cursor_decode(filters.cursor) if filters.cursor else None,
        limit=filters.limit,
        scope=lambda qs: runs_visible(qs, principal.tenants),
    )
    return {
        "runs": [_run_out(r, page.tenants[r.run_id], principal) for r in page.runs],
        "next_cursor": _cursor_encode(page.runs[-1]) if page.more else None,
    }


@router.get("/runs/{run_id}", response=responses({200: RunOut}), auth=caller("read"), summary="One run")
def run_view(request: HttpRequest, run_id: str):
    run = _visible_run(request.auth, run_id)
    return _run_out(run, run_tenants(run_id=run_id), request.auth)


@router.get("/runs/{run_id}/state", response=responses({200: RunStateOut}), auth=caller("read"), summary="A run's folded state")
def run_state_view(request: HttpRequest, run_id: str, at: int | None = Query(None, ge=0, le=BIG, description="fold up to this seq (default: the last)")):
    """The run's state after event ``at``, folded from the log (the replay document of ``manage.py replay``)."""
    run = _visible_run(request.auth, run_id)
    if at is not None and at > run.last_seq:
        raise Unprocessable(f"at={at} is past the run's last seq {run.last_seq}")
    # The latest state is what a resuming agent or a screen asks for: the current snapshot plus
    # its tail (run_state_fast falls back to the full replay on any miss). A past seq is an audit
    # question and is folded from event 1.
    latest = at is None or at == run.last_seq
    state = run_state_fast(run_id) if latest else run_state(run_id=run_id, at=at)
    # Sensitive argument fields are masked wherever they appear (messages, calls, results).
    # The key secret is not part of the replay document; an agent resuming the run needs it, and
    # masking hides it from every caller without the append scope (NEVER_REVEALED).
    mask = mask_fields(request.auth)
    doc = {**state.to_dict(), KEY_SECRET_FIELD: state.key_secret}
    if latest:
        doc["stale_observations"] = stale_observations(run_id=run_id, state=state)
    doc = masked(doc, mask, run_sensitive_values(run_ids=[run_id], fields=mask))
    unmasked_reads_record(who=request.auth, mask=mask, route=request_route(request), shown=[Shown(run_id, doc, prefix="state.")])
    return doc
