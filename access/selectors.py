"""Reads of the access record: the compliance screen's search and a run's own record."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Q

from access.models import AccessRecord
from runs.paging import CursorError, Page, cursor_decode, cursor_encode


def access_cursor(rec: AccessRecord) -> str:
    """The keyset cursor that follows ``rec`` in the newest-first list: its time and id."""
    return cursor_encode(rec.at, rec.id)


def access_cursor_parse(text: str) -> tuple[datetime, int]:
    """``access_cursor``'s text back to (at, id); ValueError names what is wrong."""
    try:
        return cursor_decode(text, (datetime, int))
    except CursorError as exc:
        raise ValueError(f"before must be a cursor from the access record's 'Older records' link ({exc}), got {text[:80]!r}") from None


def access_records_search(*, who: str = "", run_id: str = "", front_end: str = "", since: datetime | None = None, until: datetime | None = None, before: str | None = None, limit: int = 50) -> Page:
    """Access records newest first, narrowed by person or token name (any part, ignoring case), run id (exact), front
    end and a time range (``since`` inclusive, ``until`` exclusive); keyset pages on (at, id)."""
    qs = AccessRecord.objects.all()
    if who:
        qs = qs.filter(actor_name__icontains=who)  # any part of the name, ignoring case, as every console filter of people
    if run_id:
        qs = qs.filter(run_id=run_id)
    if front_end:
        qs = qs.filter(front_end=front_end)
    if since is not None:
        qs = qs.filter(at__gte=since)
    if until is not None:
        qs = qs.filter(at__lt=until)
    if before is not None:
        at, pk = access_cursor_parse(before)
        qs = qs.filter(Q(at__lt=at) | Q(at=at, id__lt=pk))
    rows = list(qs.order_by("-at", "-id")[: limit + 1])
    more = len(rows) > limit
    rows = rows[:limit]
    return Page(rows, access_cursor(rows[-1]) if more and rows else None)


def run_access_records(*, run_id: str, limit: int = 50) -> list[AccessRecord]:
    """The newest records of who was shown this run's sensitive values, for its audit screen."""
    return list(AccessRecord.objects.filter(run_id=run_id).order_by("-at", "-id")[:limit])
