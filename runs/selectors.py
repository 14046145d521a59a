"""Reads of runs and their folded state. Screens, commands and the API call these; none folds by hand."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable

from django.db import connection
from django.db.models import Q, QuerySet, TextField, Value
from django.db.models.functions import Now

from runs.errors import RunNotFound
from runs.fold import RunState, fold
from runs.identity import KEY_SECRET_FIELD
from runs.measurements import metrics_record
from runs.models import Run, RunTenant
from runs.store import events_read, events_replay
from runs.upcasters import DEFAULT_TENANT


def run_get(*, run_id: str) -> Run:
    try:
        return Run.objects.get(run_id=run_id)
    except Run.DoesNotExist:
        raise RunNotFound(run_id) from None


def run_state(*, run_id: str, at: int | None = None) -> RunState:
    """The run's state after event ``at`` (default: the last), folded from the log.

    RunNotFound for a run that does not exist; the run row is only looked up when the log has no
    events to fold, since events exist only for a run that does. A full replay, measured in process
    memory like every replay (``full_replays{selector}``, ``events_replayed``, ``replay_duration_ms``).
    """
    t0 = time.perf_counter()
    state = fold(events_replay(run_id=run_id, upto=at))  # chunk by chunk: memory holds the state and one chunk
    if not state.last_seq:
        run_get(run_id=run_id)
    elapsed_ms = (time.perf_counter() - t0) * 1000.0
    metrics_record([("full_replays", "selector", 1), ("events_replayed", "", state.last_seq), ("replay_duration_ms", "", elapsed_ms)])
    return state


def run_key_secret(*, run_id: str) -> str | None:
    """The run's key secret, from its run_started (seq 1), or None for a run without one.

    For a reader that does not fold from seq 1 and meets a start with no recorded key (rare: the
    agent client records every key) and must compute it as the fold does (runs.calls.start_key).
    """
    first = events_read(run_id=run_id, after=0, upto=1)
    return first[0].payload.get(KEY_SECRET_FIELD) if first and first[0].type == "run_started" else None


def _created_at_bound(created: datetime):
    """``created`` as the keyset bound on ``Run.created_at``.

    SQLite keeps the column as the text its Now() wrote, with milliseconds ('...33.489'), and
    compares text; Django would bind the cursor's datetime with microseconds ('...33.489000'), which
    sorts after the stored text of the very same instant, so the last run of a page would come back
    at the top of the next. The bound is written the way the column is.
    """
    if connection.vendor != "sqlite":
        return created
    utc = created.astimezone(timezone.utc) if created.tzinfo else created
    text = utc.strftime("%Y-%m-%d %H:%M:%S.%f")
    return Value(text[:-3] if utc.microsecond % 1000 == 0 else text, output_field=TextField())


@dataclass
class RunsPage:
    runs: list[Run]
    tenants: dict[str, set[str]]  # every run of the page, "default" for a run that names no tenant
    more: bool  # another page follows the last run of this one


def runs_filter(
    *,
    origin: str | None = None,
    finished: bool | None = None,
    leased: bool | None = None,
    tenant: str | None = None,
    run_id_prefix: str | None = None,
    after: tuple[datetime, str] | None = None,
    limit: int = 50,
    scope: Callable[[QuerySet], QuerySet] | None = None,
) -> RunsPage:
    """Runs newest first (created_at, then run id, both descending), one page of ``limit``.

    ``leased``: someone holds the lease now (by its expiry, on the database's clock). ``tenant``:
    runs that name that tenant. ``after``: the (created_at, run_id) of the last run of the previous
    page (keyset pagination). ``scope`` narrows the runs first; callers pass the visibility rule of
    who is asking (access.tenancy), which this layer does not know.
    """
    qs = Run.objects.all()
    if scope is not None:
        qs = scope(qs)
    if origin:
        qs = qs.filter(origin=origin)
    if finished is not None:
        qs = qs.filter(finished_seq__isnull=not finished)
    if leased is not None:
        live = Q(lease_expires_at__gt=Now()) & ~Q(lease_holder="")
        qs = qs.filter(live) if leased else qs.exclude(live)
    if tenant:
        qs = qs.filter(run_id__in=RunTenant.objects.filter(tenant=tenant).values("run_id"))
    if run_id_prefix:
        qs = qs.filter(run_id__startswith=run_id_prefix)
    if after is not None:
        created, last_id = after
        at = _created_at_bound(created)
        qs = qs.filter(Q(created_at__lt=at) | Q(created_at=at, run_id__lt=last_id))
    page = list(qs.order_by("-created_at", "-run_id")[: limit + 1])
    more = len(page) > limit
    page = page[:limit]
    tenants: dict[str, set[str]] = {r.run_id: set() for r in page}
    for rid, t in RunTenant.objects.filter(run_id__in=list(tenants)).values_list("run_id", "tenant"):
        tenants[rid].add(t)
    return RunsPage(page, {rid: ts or {DEFAULT_TENANT} for rid, ts in tenants.items()}, more)
