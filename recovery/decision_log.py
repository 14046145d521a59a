"""The decision log: one JSON log line per recovery decision appended, whoever appended it.

A projector like the uncertain-call projection, registered with the store in RecoveryConfig.ready.
Fencing rejections (runs.store), recovery decisions and API refusals log their run id, key and
epoch as extras; a log shipper can then filter on ``run_id`` without parsing prose.
"""

from __future__ import annotations

import logging
import threading

from django.db import connection, transaction

from recovery.masking import runs_sensitive_values, sensitive_fields, value_mask

DECISION_TYPES = frozenset({"tool_call_uncertain", "reconciliation_attempted", "approval_requested", "approval_decided", "tool_call_resolved"})
FREE_TEXT = ("decision", "by", "rule")  # what a line may quote beyond ids and closed vocabularies
decisions = logging.getLogger("reckon.recovery.decisions")


class _Batch:
    """The decision lines of one transaction's appends, and the masking they share.

    A reconciliation group commits up to twenty calls' decisions together; each append's lines
    are still logged by an on-commit callback of its own (so a line of an append undone by a
    savepoint rollback is never logged), but the first of them to run reads the sensitive fields
    and the sensitive values of every run the transaction appended to, for all of them: two or
    three queries per commit instead of per append. Each line is masked by its own run's values,
    read after its commit, exactly as before.
    """

    __slots__ = ("hooks", "run_ids", "masking")

    def __init__(self, hooks):
        self.hooks = hooks  # the connection's on-commit list of this transaction (a new list per transaction)
        self.run_ids: set[str] = set()
        self.masking: tuple[frozenset[str], dict[str, frozenset[str]]] | None = None

    def mask_for(self, run_id: str) -> tuple[frozenset[str], frozenset[str]]:
        if self.masking is None:
            fields = sensitive_fields()
            self.masking = (fields, runs_sensitive_values(run_ids=self.run_ids, fields=fields))
        fields, values = self.masking
        return fields, values.get(run_id, frozenset())


_batches = threading.local()


def _batch() -> _Batch:
    # Django gives each transaction a new list of on-commit callbacks: the batch is the current
    # transaction's while that list is the connection's. A batch whose lines started to be logged is
    # never extended (an append made by an on-commit callback belongs to a new transaction).
    hooks = connection.run_on_commit
    batch = getattr(_batches, "current", None)
    if batch is None or batch.hooks is not hooks or batch.masking is not None:
        batch = _batches.current = _Batch(hooks)
    return batch


def recovery_decisions_log(run_id: str, events: list, epoch: int) -> None:
    """Projector: one JSON line per recovery decision appended, by whoever appended it (the
    reconciliation worker, a person in the console, a script through the API).

    Logged on commit, so a line never describes a decision the database rolled back. The epoch is
    the one the append's fence just accepted. Logs are read by people without the sensitive-data
    permission: the free text of a line (a rule may quote an adapter's error) is masked by the
    run's sensitive values, as a screen would show it.
    """
    mine = [e for e in events if e.type in DECISION_TYPES]
    if not mine or not decisions.isEnabledFor(logging.INFO):
        # A level that drops the lines (RECKON_LOG_LEVEL above INFO) drops their masking's reads too.
        return
    lines = []
    for e in mine:
        p = e.payload
        lines.append(
            {
                "run_id": run_id,
                "key": p.get("idempotency_key") or p.get("operation_id"),
                "epoch": epoch,
                "seq": e.seq,
                "event": e.type,
                "call_id": p.get("call_id"),
                "decision": p.get("decision") or p.get("disposition") or p.get("outcome") or p.get("reason"),
                "by": p.get("by"),
                "rule": p.get("rule"),
            }
        )
    batch = _batch()
    batch.run_ids.add(run_id)

    def emit():
        fields, values = batch.mask_for(run_id)
        for line in lines:
            # Ids stay as they are, so a shipper can still filter on them; the free text is masked.
            text = {k: line[k] for k in FREE_TEXT}
            decisions.info("recovery decision", extra={**line, **value_mask(text, fields, values)})

    transaction.on_commit(emit)
