"""The release gate of snapshots: full-replay equivalence (docs/schema-versions.md, "The release
gate"). ``snapshot_verify`` folds a run from its current snapshot plus tail and from its whole log
and compares the two; ``snapshot_repair`` settles a snapshot a read found unusable. A difference
quarantines the fold version; a snapshot that fails its own checks is discarded as a miss."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from django.db import transaction

from runs.fold import fold
from runs.measurements import metrics_record
from runs.models import Snapshot, SnapshotPointer
from runs.snapshot_format import state_diff
from runs.snapshots import Restored, snapshot_discard, snapshot_pointed, snapshot_restore, version_quarantine
from runs.store import events_replay


@dataclass
class Verification:
    run_id: str
    snapshot_id: int | None
    seq: int | None
    version: str
    outcome: str  # equal, mismatch, miss, none
    fields: list[str] = dataclasses.field(default_factory=list)
    detail: str = ""
    tail: int = 0
    events: int = 0

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    def line(self) -> str:
        where = f"snapshot {self.snapshot_id} at seq {self.seq} (fold {self.version})"
        if self.outcome == "equal":
            return f"run {self.run_id}: {where} + {self.tail} tail events equals the full replay of {self.events} events"
        if self.outcome == "mismatch":
            return f"run {self.run_id}: {where} + {self.tail} tail events DIFFERS from the full replay of {self.events} events in {', '.join(self.fields)}; fold {self.version} quarantined"
        if self.outcome == "miss":
            return f"run {self.run_id}: {where} is unusable ({self.detail}); discarded, recovery uses the full log"
        return f"run {self.run_id}: no snapshot"


def _check(run_id: str, snap: Snapshot | None, pointer_exists: bool) -> tuple[Verification, Restored]:
    """Fold ``snap`` plus its tail and the full log in one transaction, and compare the two."""
    version = f"{snap.fold_version}/{snap.fold_code}" if snap is not None else ""
    result = Verification(run_id, snap.id if snap else None, snap.seq if snap else None, version, "equal")
    with transaction.atomic():
        # One transaction, so both computations read the same log even while a writer appends.
        restored = snapshot_restore(run_id, snap, pointer_exists, None)
        if restored.miss:
            result.outcome, result.detail = "miss", f"{restored.miss}: {restored.detail}"
        else:
            fast = restored.state
            full = fold(events_replay(run_id=run_id, upto=fast.last_seq))
            result.tail, result.events = restored.tail, full.last_seq
            result.fields = state_diff(fast, full)
            if result.fields:
                result.outcome = "mismatch"
    return result, restored


def _settle(run_id: str, snap: Snapshot | None, pointed: int | None, result: Verification, restored: Restored, *, count_miss: bool) -> None:
    """Act on a check: discard (and unpublish) a miss, quarantine the version of a mismatch."""
    if result.outcome == "miss":
        if count_miss:
            metrics_record([("snapshot_misses", restored.miss, 1)])
        if snap is not None:
            snapshot_discard(snapshot_id=snap.id, reason=result.detail)
        elif pointed is not None:  # a dangling pointer; unless it has moved on meanwhile
            SnapshotPointer.objects.filter(run_id=run_id, snapshot_id=pointed).delete()
    elif result.outcome == "mismatch":
        reason = f"run {run_id} snapshot {snap.id} at seq {snap.seq}: differs from the full replay in {', '.join(result.fields)}"
        metrics_record([("full_replay_equivalence_failures", "", 1)])
        version_quarantine(fold_version=snap.fold_version, fold_code=snap.fold_code, reason=reason)
        snapshot_discard(snapshot_id=snap.id, reason=f"equivalence: differs in {', '.join(result.fields)}")


def snapshot_verify(*, run_id: str) -> Verification:
    """Compute the run's state from its current snapshot plus tail and from the full log; compare.

    A difference is a ``full_replay_equivalence_failures``: the snapshot is discarded and its fold
    version quarantined, so no snapshot of that version is loaded again. A snapshot that fails its
    own checks is an ordinary miss (counted and discarded, not an equivalence failure).
    """
    pointed = snapshot_pointed(run_id)
    if pointed is None:
        return Verification(run_id, None, None, "", "none")
    snap = Snapshot.objects.filter(id=pointed, run_id=run_id).first()
    result, restored = _check(run_id, snap, True)
    _settle(run_id, snap, pointed, result, restored, count_miss=True)
    return result


def snapshot_repair(*, run_id: str, snapshot_id: int) -> Verification:
    """Settle a snapshot that a read found unusable: re-check it now and act on what is found.

    Still a miss: discarded and unpublished (not counted again: the read counted it). It loads but
    differs from the full replay: its version is quarantined, as ``verify_snapshots`` would. It now
    passes (the pointer was repaired meanwhile): left alone. Idempotent, so a repair enqueued by
    several reads of the same snapshot settles it once. A pointer that has moved on to another
    snapshot is never touched.
    """
    snap = Snapshot.objects.filter(id=snapshot_id, run_id=run_id).first()
    pointed = snapshot_id if snap is None and snapshot_pointed(run_id) == snapshot_id else None
    if snap is None and pointed is None:
        return Verification(run_id, snapshot_id, None, "", "none", detail="gone: the pointer no longer names it")
    result, restored = _check(run_id, snap, True)
    _settle(run_id, snap, pointed, result, restored, count_miss=False)
    return result


def runs_with_snapshots(*, sample: int | None = None) -> list[str]:
    """Run ids with a published snapshot; a random ``sample`` of them when given."""
    qs = SnapshotPointer.objects.values_list("run_id", flat=True)
    qs = qs.order_by("?")[:sample] if sample is not None else qs.order_by("run_id")
    return list(qs)
