"""Replay and snapshot measurements (docs/schema-versions.md, "Measurements"), kept in process memory with prometheus_client.

A replay is a read, and a read must not write to the database: these figures used to be upserted
into a table on every replay, which turned every ``GET`` of a run's state into a write. They are now
ordinary Prometheus instruments. Each series ``name`` is published as it always was:

    reckon_<name>_count{label}, reckon_<name>_sum{label}   a summary: observations and their total
    reckon_<name>_last{label}                             the latest observation
    reckon_<name>_max{label}                              the largest observation

``label`` separates series of one name (the reason of a snapshot miss; empty otherwise).

Several processes replay (gunicorn workers, Celery workers, commands), so the client's multiprocess
mode is used whenever ``settings.PROMETHEUS_MULTIPROC_DIR`` is set (the default): every process
writes its values to its own files in that folder and ``collectors()`` merges them (sums and
counts added, ``_last`` the most recent, ``_max`` the largest). The folder is chosen before
prometheus_client is first imported (reckon/settings.py) and cleaned at start-up (runs/metrics_dir.py).
"""

from __future__ import annotations

import os
import threading

from django.conf import settings

# Load the settings (which export PROMETHEUS_MULTIPROC_DIR) before the client is imported: the
# client chooses between process memory and the shared folder once, at its own import (and the
# settings refuse to load if it was imported earlier under another choice).
_ = settings.PROMETHEUS_MULTIPROC_DIR

from prometheus_client import CollectorRegistry, Gauge, Summary  # noqa: E402
from prometheus_client.multiprocess import MultiProcessCollector  # noqa: E402

# name: what one observation is. The six replay and snapshot series, plus the reasons behind the misses
# and the replays that started from event 1.
SERIES = {
    "events_replayed": "Events folded by one replay (the tail after a snapshot, or the whole log)",
    "replay_duration_ms": "Duration of one replay in milliseconds, snapshot load included",
    "snapshot_load_ms": "Loading and checking a snapshot that was used (its count is the number of snapshot hits)",
    "snapshot_write_ms": "Writing and publishing one snapshot, in milliseconds",
    "snapshot_seq_gap": "Events folded on top of the snapshot a replay started from (the tail length)",
    "full_replay_equivalence_failures": "Snapshots whose state plus tail differed from the full replay",
    "snapshot_misses": "Snapshots that failed a check on load, labelled with the reason",
    "full_replays": "Replays that folded the run from event 1, labelled with why (none, miss, before_snapshot, selector)",
}

REGISTRY = CollectorRegistry(auto_describe=True)  # our own: the global one carries process collectors


def multiprocess_dir() -> str:
    """The folder the processes share, or "" when this process keeps its figures to itself."""
    return getattr(settings, "PROMETHEUS_MULTIPROC_DIR", "") or ""


class _Series:
    def __init__(self, name: str, doc: str):
        self.summary = Summary(f"reckon_{name}", doc, ["label"], registry=REGISTRY)
        self.last = Gauge(f"reckon_{name}_last", f"Latest {name}", ["label"], registry=REGISTRY, multiprocess_mode="mostrecent")
        self.peak = Gauge(f"reckon_{name}_max", f"Largest {name} seen", ["label"], registry=REGISTRY, multiprocess_mode="max")


_SERIES = {name: _Series(name, doc) for name, doc in SERIES.items()}

# The six are shown from the first scrape, at 0 until observed: a series that first appears
# at 1 hides that first increase from rate() and increase(), and the first
# full_replay_equivalence_failures is exactly the one a release gate must not miss.
SEED_SERIES = ("events_replayed", "replay_duration_ms", "snapshot_load_ms", "snapshot_write_ms", "snapshot_seq_gap", "full_replay_equivalence_failures")
for _name in SEED_SERIES:
    _SERIES[_name].summary.labels("")
    _SERIES[_name].last.labels("")
    _SERIES[_name].peak.labels("")

# The largest value this process has observed per series: a Gauge cannot compare, so the peak is
# kept here and set when it grows. Forgotten after a fork (the child's own files start at zero).
_peaks: dict[tuple[str, str], float] = {}
_peaks_pid = os.getpid()
_lock = threading.Lock()


def metrics_record(observations: list[tuple[str, str, float]]) -> None:
    """Add observations ``(name, label, value)`` in this process: no database, no I/O beyond the
    client's memory-mapped files. An unknown name is a KeyError: a typo must not create a series."""
    global _peaks_pid
    for name, label, value in observations:
        series, v = _SERIES[name], float(value)
        series.summary.labels(label).observe(v)
        series.last.labels(label).set(v)
        with _lock:
            if _peaks_pid != os.getpid():
                _peaks.clear()
                _peaks_pid = os.getpid()
            if v > _peaks.get((name, label), float("-inf")):
                _peaks[(name, label)] = v
                series.peak.labels(label).set(v)


def collectors() -> list:
    """What /metrics adds to its registry: every process's figures (multiprocess mode), else ours."""
    path = multiprocess_dir()
    if path:
        return [MultiProcessCollector(None, path=path)]
    return [REGISTRY]


def replay_metrics() -> dict[str, dict]:
    """Every series observed so far, by any process sharing the folder:
    ``{"name" or "name{label}": {name, label, count, total, last, max}}``."""
    out: dict[str, dict] = {}
    suffixes = (("_count", "count"), ("_sum", "total"), ("_last", "last"), ("_max", "max"))
    for collector in collectors():
        for family in collector.collect():
            for sample in family.samples:
                for suffix, field in suffixes:
                    if sample.name.startswith("reckon_") and sample.name.endswith(suffix):
                        name = sample.name[len("reckon_") : -len(suffix)]
                        if name in SERIES:
                            label = sample.labels.get("label", "")
                            key = f"{name}{{{label}}}" if label else name
                            row = out.setdefault(key, {"name": name, "label": label, "count": 0, "total": 0.0, "last": 0.0, "max": 0.0})
                            row[field] = int(sample.value) if field == "count" else sample.value
                        break
    return out
