"""Detection: in-flight starts whose writer is gone become uncertain calls (tool_call_uncertain).
"""

from __future__ import annotations

import logging

from recovery.calls import call_about
from recovery.errors import RunBusy
from recovery.models import InFlightCall, UncertainCall
from recovery.ownership import owning
from runs.errors import FenceError
from runs.fold import format_ts
from runs.leases import db_now
from runs.models import Run
from runs.store import NewEvent

log = logging.getLogger("reckon.recovery")
S = UncertainCall.State


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

def _in_flight(rid: str) -> list:
    """The run's calls in flight, full rows and narrow ones alike (both have the fields detection
    reads: call_id, idempotency_key, start_seq, start_epoch, tool), in start order."""
    rows = list(UncertainCall.objects.filter(run_id=rid, state=S.IN_FLIGHT))
    rows += list(InFlightCall.objects.filter(run_id=rid))
    return sorted(rows, key=lambda r: r.start_seq)


def uncertain_calls_detect(*, run_id: str | None = None) -> dict:
    """Turn in-flight starts whose writer is gone into uncertain calls, appending tool_call_uncertain.

    A start is in flight while the lease of the epoch that wrote it is live. Once that lease expired,
    or a later epoch holds the run, or the run was imported with no live owner, nobody will complete
    it: the event is appended under the run's own lease. A run whose new owner is live right now is
    left for the next scan (or for that owner, which sees the same unmatched start).

    Calls in flight live in two places: ``InFlightCall`` (a start nothing else has happened to, the
    agent's hot path) and full ``UncertainCall`` rows in state in_flight (flagged, claimed...). Both
    are read; the appended tool_call_uncertain promotes a narrow one to a full row (the projection).
    """
    full = UncertainCall.objects.filter(state=S.IN_FLIGHT)
    narrow = InFlightCall.objects.all()
    if run_id is not None:
        full, narrow = full.filter(run_id=run_id), narrow.filter(run_id=run_id)
    run_ids = sorted(set(full.values_list("run_id", flat=True)) | set(narrow.values_list("run_id", flat=True)))
    marked, busy = 0, []
    for rid in run_ids:
        now = db_now()
        run = Run.objects.filter(run_id=rid).values("lease_epoch", "lease_holder", "lease_expires_at", "origin").first()
        if run is None:
            continue
        rows = _in_flight(rid)
        if not any(_uncertain_reason(run, r, now) for r in rows):
            continue
        try:
            with owning(rid) as owner:
                # Under the lease nothing else can append: re-read, then decide once.
                rows = _in_flight(rid)
                events = []
                for r in rows:
                    reason = _uncertain_reason(run, r, now)
                    if reason:
                        events.append(NewEvent("tool_call_uncertain", {**call_about(r), "reason": reason, "tool": r.tool, "epoch": r.start_epoch}))
                if events:
                    owner.append(events)
                    marked += len(events)
        except RunBusy:
            busy.append(rid)
        except FenceError as exc:
            log.warning("detection fenced", extra={"run_id": rid, "reason": str(exc)})
    return {"marked": marked, "busy": busy}
