"""Reads of runs and their folded state. Screens, commands and the API call these; none folds by hand."""

from __future__ import annotations

import time

from runs.errors import RunNotFound
from runs.fold import RunState, fold
from runs.models import Run
from runs.store import events_load


def run_get(*, run_id: str) -> Run:
    try:
        return Run.objects.get(run_id=run_id)
    except Run.DoesNotExist:
        raise RunNotFound(run_id) from None


def run_state(*, run_id: str, at: int | None = None) -> RunState:
    """The run's state after event ``at`` (default: the last), folded from the log.

    RunNotFound for a run that does not exist; the run row is only looked up when the log has no
    events to fold, since events exist only for a run that does. Like the snapshot path, a full
    replay records ``events_replayed`` and ``replay_duration_ms`` (seed 5.8), labelled ``full`` so
    that /metrics tells these audit reads from event 1 apart from resumptions (label ``""``, the
    snapshot path and its fallback).
    """
    from runs.snapshots import metrics_record

    t0 = time.perf_counter()
    events = events_load(run_id=run_id, upto=at)
    if not events:
        run_get(run_id=run_id)
    st = fold(events)
    metrics_record([("events_replayed", "full", len(events)), ("replay_duration_ms", "full", (time.perf_counter() - t0) * 1000.0)])
    return st
