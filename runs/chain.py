"""The hash chain over each run's log: the backfill of events stored before the chain existed, and
the check that recomputes every chain from the stored events and their seals.

The definitions (canonical bytes, seals, genesis, the link) live in ``runs.verify``, the
standalone verifier, so the writer and an offline reviewer share one text; docs/evidence.md states
them. The append path frames each event's canonical bytes (runs.canonical) and links them in the
appending process (runs/store_pg.py, runs/store_sqlite.py), from the run's head, which the fence
compares and sets in the append's own statement: the database computes no hash. A run chained before chain v3
links its first ``chain_v2_upto`` events by their digests (``runs.verify.event_link``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import UTC, datetime

from django.db import connection, transaction

from runs.canonical import seal_commitments, seal_pointers, sealed_names
from runs.models import EventHash, EventSeal, Run
from runs.store import payload_loads
from runs.verify import event_link, genesis, sealed_event_canonical, ts_text


def chain_rows(run_id: str):
    """The run's stored events as (seq, type, v, ts, payload, stored hash, salts), in seq order;
    the stored hash is the row's own or the backfill's, the salts those of its sealed values
    ({pointer: bytes}, empty when none)."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT e.seq, e.type, e.v, e.ts, e.payload, COALESCE(e.hash, h.hash), s.salts FROM reckon_event e "
            "LEFT JOIN reckon_event_hash h ON h.run_id = e.run_id AND h.seq = e.seq "
            "LEFT JOIN reckon_event_seal s ON s.run_id = e.run_id AND s.seq = e.seq WHERE e.run_id = %s ORDER BY e.seq",
            [run_id],
        )
        for seq, type_, v, ts, payload, stored, salts in cur.fetchall():
            if isinstance(ts, str):
                ts = datetime.fromisoformat(ts)
            if ts.tzinfo is None:
                ts = ts.replace(tzinfo=UTC)
            if isinstance(payload, (str, bytes)):
                payload = payload_loads(payload)
            salts = {p: bytes.fromhex(x) for p, x in json.loads(salts).items()} if salts else {}
            yield seq, type_, v, ts, payload, (bytes(stored) if stored is not None else None), salts


def event_chain_canonical(seq: int, type_: str, v: int, ts: datetime, payload, salts: dict[str, bytes]) -> bytes:
    """The canonical bytes the chain links for a stored event (KeyError: a salt names no value)."""
    return sealed_event_canonical(seq=seq, type=type_, ts=ts_text(ts), v=v, payload=payload, commitments=seal_commitments(payload, salts))


def _canonical(seq, type_, v, ts, payload, salts) -> bytes | None:
    try:
        return event_chain_canonical(seq, type_, v, ts, payload, salts)
    except KeyError:
        return None  # a salt for a value the payload does not hold: not the event that was chained


def chain_backfill(*, run_id: str) -> int:
    """Chain a run recorded before the chain existed: hash every event from genesis, keep the
    hashes of events without one in the side table, and set the run's head. Appends wait on the
    run row's lock meanwhile. The number of hashes written (0 for a run already chained)."""
    with transaction.atomic():
        run = Run.objects.select_for_update().filter(run_id=run_id).values("last_seq", "head").first()
        if run is None or run["head"] is not None or run["last_seq"] == 0:
            return 0
        prev = genesis(run_id)  # chain v3 from the start: the run's chain_v2_upto is NULL (migration 0011)
        missing, seals = [], []
        names = sealed_names()
        for seq, type_, v, ts, payload, stored, salts in chain_rows(run_id):
            if stored is None and not salts:
                salts = {p: os.urandom(16) for p in seal_pointers(payload, names)}
                if salts:
                    seals.append(EventSeal(run_id=run_id, seq=seq, salts=json.dumps({p: x.hex() for p, x in salts.items()}, sort_keys=True)))
            prev = event_link(prev, seq, event_chain_canonical(seq, type_, v, ts, payload, salts))
            if stored is None:
                missing.append(EventHash(run_id=run_id, seq=seq, hash=prev))
        EventSeal.objects.bulk_create(seals, batch_size=1000)
        EventHash.objects.bulk_create(missing, batch_size=1000)
        Run.objects.filter(run_id=run_id).update(head=prev)
        return len(missing)


@dataclass(frozen=True)
class ChainProblem:
    run_id: str
    seq: int | None
    kind: str  # payload changed | event missing | order changed | head differs | not chained | rolled back | run deleted
    detail: str

    def line(self) -> str:
        where = f" seq {self.seq}" if self.seq is not None else ""
        return f"run {self.run_id}{where}: {self.kind}: {self.detail}"

    def as_dict(self) -> dict:
        return {"run_id": self.run_id, "seq": self.seq, "problem": self.kind, "detail": self.detail}


def chain_verify(*, run_id: str, hashes_at: dict[int, bytes | None] | None = None) -> tuple[ChainProblem | None, int, bytes | None]:
    """Recompute the run's chain from its stored events, trusting no stored hash, and compare.

    Returns (the first problem or None, the last seq recomputed, the recomputed head).
    ``hashes_at``: seqs (its keys) whose recomputed hashes are wanted (a checkpoint's seq); each
    value is set as the chain passes that seq.
    """
    run = Run.objects.filter(run_id=run_id).values("last_seq", "head", "chain_v2_upto").first()
    if run is None:
        return ChainProblem(run_id, None, "run deleted", "no such run"), 0, None
    rows = list(chain_rows(run_id))
    v2_upto = run["chain_v2_upto"] or 0
    prev = genesis(run_id, v2_upto=v2_upto)
    expected = 1
    for i, (seq, type_, v, ts, payload, stored, salts) in enumerate(rows):
        if seq != expected:
            return ChainProblem(run_id, expected, "event missing", f"seq {expected} is not stored (the next stored is seq {seq})"), expected - 1, prev
        c = _canonical(seq, type_, v, ts, payload, salts)
        computed = event_link(prev, seq, c, v2_upto) if c is not None else None
        if stored is None:
            return ChainProblem(run_id, seq, "not chained", "the event has no hash: run manage.py chain_backfill"), seq - 1, prev
        if computed != stored:
            # Another stored event that hashes to its own stored hash at this position was moved here
            # from there: the order changed. Otherwise this event's content is not what was hashed.
            for later in rows[i + 1 :]:
                lseq, ltype, lv, lts, lpayload, lstored, lsalts = later
                lc = _canonical(seq, ltype, lv, lts, lpayload, lsalts)
                if lstored is not None and lc is not None and event_link(prev, seq, lc, v2_upto) == lstored:
                    return ChainProblem(run_id, seq, "order changed", f"the event stored at seq {lseq} belongs at seq {seq}"), seq - 1, prev
            return ChainProblem(run_id, seq, "payload changed", "the stored event does not match the hash recorded when it was appended"), seq - 1, prev
        prev = computed
        if hashes_at is not None and seq in hashes_at:
            hashes_at[seq] = computed
        expected += 1
    last = expected - 1
    if last < run["last_seq"]:
        return ChainProblem(run_id, last + 1, "event missing", f"the run row's last seq is {run['last_seq']}, the log ends at seq {last}"), last, prev
    if last > run["last_seq"]:
        return ChainProblem(run_id, run["last_seq"], "head differs", f"the log holds seq 1..{last} but the run row's last seq is {run['last_seq']}"), last, prev
    head = bytes(run["head"]) if run["head"] is not None else None
    if last == 0 and head is None:
        return None, 0, prev
    if head != prev:
        return ChainProblem(run_id, last, "head differs", f"the run row's head {head.hex() if head else None} is not the recomputed {prev.hex()}"), last, prev
    return None, last, prev
