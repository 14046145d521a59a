"""The chain over each run's access records: who was shown its sensitive values cannot be quietly
edited, removed or reordered, any more than the run's log can (docs/evidence.md).

Each record gets its number within the run and ``hash = sha256(prev || sha256(canonical record))``
from ``access_genesis(run_id)``, in a side table written in the record's own transaction; the run's
head row is locked meanwhile, so two writers number and chain one after the other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.db import transaction

from access.models import AccessChainLink, AccessHead, AccessRecord
from runs.verify import access_canonical, access_genesis, chain_link, digest, ts_text


def access_record_dict(record: AccessRecord, n: int) -> dict:
    """The record as the chain encodes it (and as an evidence bundle's access.jsonl shows it); the
    actor's issuer and subject only for a person signed in through the identity provider."""
    identity = {"actor_issuer": record.actor_issuer, "actor_subject": record.actor_subject} if record.actor_subject is not None else {}
    return {**identity,
        "n": n,
        "at": ts_text(record.at),
        "actor_kind": record.actor_kind,
        "actor_name": record.actor_name,
        "front_end": record.front_end,
        "run_id": record.run_id,
        "call_id": record.call_id,
        "idempotency_key": record.idempotency_key,
        "seq": record.seq,
        "fields": list(record.fields),
        "all_fields": record.all_fields,
        "why": record.why,
    }


def access_chain_append(records: Sequence[AccessRecord]) -> None:
    """Chain ``records`` (just written, in this transaction) onto their runs' access chains."""
    by_run: dict[str, list[AccessRecord]] = {}
    for r in records:
        by_run.setdefault(r.run_id, []).append(r)
    with transaction.atomic():
        links = []
        for run_id in sorted(by_run):  # one lock order for every writer
            AccessHead.objects.get_or_create(run_id=run_id)
            head = AccessHead.objects.select_for_update().get(run_id=run_id)
            prev = bytes(head.head) if head.head is not None else access_genesis(run_id)
            n = head.count
            for r in sorted(by_run[run_id], key=lambda r: r.pk):
                n += 1
                prev = chain_link(prev, digest(access_canonical(access_record_dict(r, n))))
                links.append(AccessChainLink(record_id=r.pk, run_id=run_id, n=n, hash=prev))
            AccessHead.objects.filter(run_id=run_id).update(count=n, head=prev)
        AccessChainLink.objects.bulk_create(links)


def access_chain_backfill() -> int:
    """Chain the access records written before the chain existed, oldest first; how many."""
    chained = set(AccessChainLink.objects.values_list("record_id", flat=True))
    todo = [r for r in AccessRecord.objects.order_by("id") if r.pk not in chained]
    if todo:
        access_chain_append(todo)
    return len(todo)


def access_rows(run_id: str) -> list[tuple[dict, bytes | None]]:
    """The run's access records in chain order, as the chain encodes them, with the stored hash
    (records not chained yet last, with None)."""
    links = {rid: (n, bytes(h)) for rid, n, h in AccessChainLink.objects.filter(run_id=run_id).values_list("record_id", "n", "hash")}
    rows = []
    for r in AccessRecord.objects.filter(run_id=run_id).order_by("id"):
        n, h = links.get(r.pk, (None, None))
        rows.append((access_record_dict(r, n), h))
    rows.sort(key=lambda x: (x[0]["n"] is None, x[0]["n"] or 0))
    return rows


@dataclass(frozen=True)
class AccessProblem:
    run_id: str
    n: int | None
    kind: str  # record changed | record missing | not chained | head differs
    detail: str

    def line(self) -> str:
        where = f" access record {self.n}" if self.n is not None else " access records"
        return f"run {self.run_id}{where}: {self.kind}: {self.detail}"


def access_chain_verify(*, run_id: str) -> tuple[AccessProblem | None, int, bytes | None]:
    """Recompute the run's access chain from the records, trusting no stored hash: (the first
    problem or None, how many records, the recomputed head or None)."""
    prev = access_genesis(run_id)
    expected = 0
    for rec, stored in access_rows(run_id):
        if rec["n"] is None:
            return AccessProblem(run_id, None, "not chained", "a record has no chain link: run manage.py chain_backfill"), expected, prev
        expected += 1
        if rec["n"] != expected:
            return AccessProblem(run_id, expected, "record missing", f"record {expected} is not stored (the next is {rec['n']})"), expected - 1, prev
        prev = chain_link(prev, digest(access_canonical(rec)))
        if prev != stored:
            return AccessProblem(run_id, expected, "record changed", "the stored record does not match the hash written with it"), expected - 1, prev
    head = AccessHead.objects.filter(run_id=run_id).values_list("count", "head").first()
    count, stored_head = (head[0], bytes(head[1]) if head[1] is not None else None) if head else (0, None)
    if count != expected:
        return AccessProblem(run_id, expected + 1 if count > expected else expected, "record missing" if count > expected else "head differs", f"the head counts {count} records, {expected} are stored"), expected, prev
    if expected and stored_head != prev:
        return AccessProblem(run_id, expected, "head differs", "the head's hash is not the recomputed one"), expected, prev
    return None, expected, (prev if expected else None)


def access_heads() -> dict[str, dict]:
    """Every run's access chain head, for signed checkpoints: run_id -> {access_count, access_head}."""
    return {r: {"access_count": n, "access_head": bytes(h).hex()} for r, n, h in AccessHead.objects.exclude(head=None).values_list("run_id", "count", "head")}
