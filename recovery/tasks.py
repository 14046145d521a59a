"""Celery tasks: each takes ids and calls one service.

The scan runs on beat (``CELERY_BEAT_SCHEDULE["recovery-scan"]``): it detects newly uncertain calls
and enqueues one ``reconcile_call`` per due call with the attempt number it is for. Tasks are
acknowledged late and rejected when the worker is lost (settings), so a worker killed mid-task has
its task redelivered; ``call_reconcile`` ignores an attempt already recorded in the log, so the
redelivery writes nothing twice.
"""

from celery import shared_task

from recovery import services


@shared_task(name="recovery.tasks.reconcile_scan")
def reconcile_scan() -> dict:
    detected = services.uncertain_calls_detect()
    queued = 0
    for pk, attempts in services.due_calls().values_list("pk", "attempts"):
        reconcile_call.delay(pk, attempts + 1)
        queued += 1
    return {"detected": detected["marked"], "queued": queued}


@shared_task(name="recovery.tasks.reconcile_call")
def reconcile_call(pk: int, attempt: int | None = None) -> dict:
    r = services.call_reconcile(pk=pk, attempt=attempt)
    return {"pk": r.pk, "status": r.status, "action": r.action, "detail": r.detail}


@shared_task(name="recovery.tasks.uncertain_detect")
def uncertain_detect() -> dict:
    return services.uncertain_calls_detect()
