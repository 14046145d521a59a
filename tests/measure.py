"""Replay measurements as a test sees them: what was observed since the test began.

``runs.measurements`` keeps its figures for the life of the processes sharing the multiprocess
folder (the whole test session and its child processes), so a test compares with the figures it
found when it started instead of expecting zero.
"""

from __future__ import annotations

from types import SimpleNamespace

from runs.measurements import replay_metrics


class Measurements:
    def __init__(self):
        self.base = replay_metrics()

    def __call__(self, name: str, label: str = "") -> SimpleNamespace | None:
        """The series' observations since the start (count, total) and its latest and largest
        values now; None when nothing was observed since the start."""
        key = f"{name}{{{label}}}" if label else name
        now = replay_metrics().get(key)
        before = self.base.get(key, {"count": 0, "total": 0.0})
        if now is None or now["count"] == before["count"]:
            return None
        return SimpleNamespace(count=now["count"] - before["count"], total=now["total"] - before["total"], last=now["last"], max=now["max"])

    def labels(self, name: str) -> list[str]:
        """The labels of ``name`` observed since the start."""
        return sorted(m["label"] for k, m in replay_metrics().items() if m["name"] == name and self(name, m["label"]) is not None)
