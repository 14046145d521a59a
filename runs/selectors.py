"""Reads of runs and their folded state. Screens, commands and the API call these; none folds by hand."""

from __future__ import annotations

import time

from runs.errors import RunNotFound
from runs.fold import RunState, fold
from runs.measurements import metrics_record
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
    events to fold, since events exist only for a run that does. A full replay, measured in process
    memory like every replay (``full_replays{selector}``, ``events_replayed``, ``replay_duration_ms``).
    """
    t0 = time.perf_counter()
    events = events_load(run_id=run_id, upto=at)
    if not events:
        run_get(run_id=run_id)
    state = fold(events)
    elapsed_ms = (time.perf_counter() - t0) * 1000.0
    metrics_record([("full_replays", "selector", 1), ("events_replayed", "", len(events)), ("replay_duration_ms", "", elapsed_ms)])
    return state
