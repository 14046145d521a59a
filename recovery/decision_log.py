"""The decision log: one JSON log line per recovery decision appended, whoever appended it.

A projector like the uncertain-call projection, registered with the store in RecoveryConfig.ready.
Fencing rejections (runs.store), recovery decisions and API refusals log their run id, key and
epoch as extras; a log shipper can then filter on ``run_id`` without parsing prose.
"""

from __future__ import annotations

import logging

from django.db import transaction

from recovery.masking import run_sensitive_values, sensitive_fields, value_mask

DECISION_TYPES = frozenset({"tool_call_uncertain", "reconciliation_attempted", "approval_requested", "approval_decided", "tool_call_resolved"})
FREE_TEXT = ("decision", "by", "rule")  # what a line may quote beyond ids and closed vocabularies
decisions = logging.getLogger("reckon.recovery.decisions")


def recovery_decisions_log(run_id: str, events: list, epoch: int) -> None:
    """Projector: one JSON line per recovery decision appended, by whoever appended it (the
    reconciliation worker, a person in the console, a script through the API).

    Logged on commit, so a line never describes a decision the database rolled back. The epoch is
    the one the append's fence just accepted. Logs are read by people without the sensitive-data
    permission: the free text of a line (a rule may quote an adapter's error) is masked by the
    run's sensitive values, as a screen would show it.
    """
    mine = [e for e in events if e.type in DECISION_TYPES]
    if not mine:
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

    def emit():
        fields = sensitive_fields()
        values = run_sensitive_values(run_ids=[run_id], fields=fields)
        for line in lines:
            # Ids stay as they are, so a shipper can still filter on them; the free text is masked.
            text = {k: line[k] for k in FREE_TEXT}
            decisions.info("recovery decision", extra={**line, **value_mask(text, fields, values)})

    transaction.on_commit(emit)
