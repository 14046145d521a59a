"""Who sees which of the reports (recovery.reports), and the detail export masked per reader: the
rules the console's reports screen, its CSV files and ``GET /api/reports/...`` share.

The tables of figures carry no sensitive value (counts, times, tools, tenants and people's names);
the detail export carries each call's arguments and key, masked as every other screen masks them
(``access.masking``), and each piece of it that shows sensitive values unmasked is recorded in the
access record before it is sent (``access.services.unmasked_reads_record``, the one writer).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from access.masking import mask_fields, masked
from access.roles import sees_people_figures
from access.services import Shown, unmasked_reads_record
from access.tokens import Principal
from recovery import reports
from recovery.masking import run_sensitive_values, sensitive_fields

DETAIL_CHUNK = 500


def report_tables(who: Principal) -> list[str]:
    """The tables ``who`` may read: all of them for a manager or an administrator signed in, all but
    the per-person one (``reports.MANAGERS_ONLY``) for anyone else, tokens included."""
    people = who.user is not None and sees_people_figures(who.user)
    return [t for t in reports.TABLES if people or t not in reports.MANAGERS_ONLY]


def report_detail_shown(*, period: reports.Period, filters: reports.Filters, now: datetime, who: Principal, route: str, front_end: str) -> Iterator[list[dict]]:
    """The detail export's rows (``reports.detail``), ``DETAIL_CHUNK`` at a time, each masked for
    ``who``. Whatever it will show unmasked is recorded now, before it returns and so before the
    first byte leaves (a reader whose mask hides every sensitive field is shown nothing, and the
    records are not even looked for); the rows themselves are read again as they are sent."""
    mask = mask_fields(who)
    if sensitive_fields() - mask:
        for rows in _chunks(period, filters, now):
            shown = [Shown(r["run_id"], {"arguments": r["arguments"], "idempotency_key": r["idempotency_key"]}, call_id=r["call_id"], idempotency_key=r["idempotency_key"]) for r in rows]
            unmasked_reads_record(who=who, mask=mask, route=route, shown=shown, front_end=front_end)
    return (_masked(rows, mask) for rows in _chunks(period, filters, now))


def _chunks(period: reports.Period, filters: reports.Filters, now: datetime) -> Iterator[list[dict]]:
    batch: list[dict] = []
    for row in reports.detail(period, filters, now=now):
        batch.append(row)
        if len(batch) == DETAIL_CHUNK:
            yield batch
            batch = []
    if batch:
        yield batch


def _masked(rows: list[dict], mask: frozenset[str]) -> list[dict]:
    values = run_sensitive_values(run_ids={r["run_id"] for r in rows}, fields=mask)
    return [{**r, "arguments": masked(r["arguments"], mask, values), "idempotency_key": masked(r["idempotency_key"], mask, values)} for r in rows]
