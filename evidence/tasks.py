"""Celery tasks of the evidence app: each takes ids and calls one function."""

from __future__ import annotations

from celery import shared_task

from evidence.signing import checkpoint_write


@shared_task(name="evidence.tasks.checkpoint_task", ignore_result=True)
def checkpoint_task() -> str:
    """Write a signed chain checkpoint (beat, every RECKON_CHECKPOINT_S); its path."""
    return str(checkpoint_write())
