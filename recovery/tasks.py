"""Celery tasks: each takes ids and calls one service.

The scan runs on beat (``CELERY_BEAT_SCHEDULE["recovery-scan"]``): it detects newly uncertain calls
and enqueues one ``reconcile_call`` per due call with the attempt number it is for. Tasks are
acknowledged late and rejected when the worker is lost (settings), so a worker killed mid-task has
its task redelivered; ``call_reconcile`` ignores an attempt already recorded in the log, so the
redelivery writes nothing twice.
"""

from celery import shared_task

from recovery.detection import uncertain_calls_detect
from recovery.reconcile import call_reconcile, calls_reconcile, due_calls


@shared_task(name="recovery.tasks.reconcile_scan")
def reconcile_scan() -> dict:
    detected = uncertain_calls_detect()
    due = [[pk, attempts + 1] for pk, attempts in due_calls().values_list("pk", "attempts")]
    # Calls travel in small batches: one message per call would spend more on the broker round
    # trip than on the call. Each call in a batch is still its own attempt, isolated from the others.
    for i in range(0, len(due), BATCH):
        reconcile_calls.delay(due[i : i + BATCH])
    return {"detected": detected["marked"], "queued": len(due)}


BATCH = 20


@shared_task(name="recovery.tasks.reconcile_calls", ignore_result=True)
def reconcile_calls(items: list) -> dict:
    """One attempt for each ``[pk, attempt]``; a failure of one call never stops the rest.

    The calls' final appends share durable commits (``recovery.reconcile.calls_reconcile``): each is still
    fenced by its own run's lease and projected in the same transaction.
    """
    statuses: dict[str, int] = {}
    for r in calls_reconcile([(pk, attempt) for pk, attempt in items]):
        status = "error" if isinstance(r, Exception) else r.status  # logged; due again on a later scan
        statuses[status] = statuses.get(status, 0) + 1
    return statuses


@shared_task(name="recovery.tasks.reconcile_call")
def reconcile_call(pk: int, attempt: int | None = None) -> dict:
    r = call_reconcile(pk=pk, attempt=attempt)
    return {"pk": r.pk, "status": r.status, "action": r.action, "detail": r.detail}


@shared_task(name="recovery.tasks.uncertain_detect")
def uncertain_detect() -> dict:
    return uncertain_calls_detect()
