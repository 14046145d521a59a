"""Celery tasks of the notifications: thin callers of notify's services.

``notification_deliver`` is acknowledged late (after it returns), so a worker killed mid-delivery
leaves the message on the broker for another worker; the row's claim and its unchanged delivery id
make that second attempt safe. Beat runs ``notifications_tick``: the escalation levels, repeats
and digests due, then a sweep of pending rows whose enqueue or countdown was lost.
"""

from __future__ import annotations

from celery import shared_task
from django.conf import settings

from notify.delivery import notification_deliver as deliver
from notify.delivery import notifications_due
from notify.escalation import digests_tick, escalations_tick
from notify.outbox import notifications_enqueue


@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def notification_deliver(notification_id: int) -> None:
    retry_in = deliver(notification_id=notification_id)
    if retry_in is not None and not settings.CELERY_TASK_ALWAYS_EAGER:
        # Eager (no broker): the next attempt waits for the sweep rather than blocking the caller.
        notification_deliver.apply_async((notification_id,), countdown=retry_in)


@shared_task(ignore_result=True)
def notifications_tick() -> None:
    escalations_tick()
    digests_tick()
    notifications_enqueue(ids=notifications_due())


@shared_task(ignore_result=True)
def report_summary_send(channels: list[str], days: int = 7) -> int:
    """The managers' summary (``manage.py report_summary``) as beat's weekly entry
    (RECKON_REPORT_SUMMARY_NOTIFY); returns the notifications written (none for a period already sent)."""
    from notify.summary import summary_write

    return len(summary_write(channels=channels, days=days))
