"""Console-only writes. Decisions, claims and notes are the recovery engine's; the console itself
records only who revealed which sensitive value, in Django's admin log (the site's audit trail, read
by administrators at /admin/admin/logentry/ and shown on the run's audit screen)."""

from __future__ import annotations

from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.contenttypes.models import ContentType

from runs.models import Event, Run

from console.selectors import MASK, value_at

REVEAL_PREFIX = "revealed "


class RevealRefused(Exception):
    """The field named is not there or is not masked; the message says which."""


def sensitive_reveal(*, user, run_id: str, seq: int, path: str, fields: frozenset[str]) -> object:
    """The unmasked value at ``path`` of event ``seq``, recording the reveal before returning it.

    The record is written first: if it cannot be written, the value is not shown.
    """
    ev = Event.objects.filter(run_id=run_id, seq=seq).only("payload").first()
    if ev is None:
        raise RevealRefused(f"run {run_id!r} has no event {seq}")
    leaf = path.rsplit(".", 1)[-1]
    if leaf not in fields:
        raise RevealRefused(f"{path} is not a sensitive field")
    try:
        value = value_at(ev.payload, path)
    except KeyError:
        raise RevealRefused(f"event {seq} has no field {path}") from None
    LogEntry.objects.create(
        user=user,
        content_type=ContentType.objects.get_for_model(Run),
        object_id=run_id,
        object_repr=run_id[:200],
        action_flag=CHANGE,
        change_message=f"{REVEAL_PREFIX}{path} of event {seq}",
    )
    return value


def export_record(*, user, run_id: str, fmt: str, digest: str) -> None:
    """An unmasked export shows every sensitive value at once, so it is recorded like a reveal."""
    LogEntry.objects.create(
        user=user,
        content_type=ContentType.objects.get_for_model(Run),
        object_id=run_id,
        object_repr=run_id[:200],
        action_flag=CHANGE,
        change_message=f"{REVEAL_PREFIX}every sensitive field in an unmasked {fmt} export (sha256 {digest})",
    )
