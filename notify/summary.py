"""The managers' summary of a period (docs/reports.md, "Summary"): the period's headline figures
beside the previous period's, and the calls still overdue, by name, sent through the notification
channels (an e-mail, a Slack message, a webhook) as a ``report.summary`` notification.

Written by ``manage.py report_summary`` (run weekly by cron or beat); the figures are the reports'
own (recovery.reports), so the summary never says something the reports screen does not. A
period's summary is written once per channel: running the command again the same day sends nothing.
"""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.utils import timezone as djtz

from notify.models import Channel, Notification
from notify.outbox import call_url, rows_write
from recovery import reports
from recovery.masking import run_sensitive_values, sensitive_fields, value_mask
from runs.fold import format_ts

TYPE = "report.summary"


class SummaryError(ValueError):
    """A summary that cannot be sent as asked (an unknown channel), in words naming it."""


def _headline(period: reports.Period, now: datetime) -> dict:
    f = reports.Filters()
    volume = reports.volume(period, f, now=now)[-1]
    ends = reports.outcomes(period, f, now=now)
    deadlines = reports.deadlines(period, f, now=now)
    late = sum(r["late"] + r["overdue"] for r in deadlines)
    judged = late + sum(r["within"] for r in deadlines)
    times = reports.times_by_risk(period, f, now=now)
    return {
        "start": format_ts(period.start),
        "end": format_ts(period.end),
        "uncertain": volume["uncertain"],
        "per_thousand": volume["per_thousand"],
        "resolved": sum(r["calls"] for r in ends if r["ended"] != "still open"),
        "still_open": next(r["calls"] for r in ends if r["ended"] == "still open"),
        "missed_pct": round(100 * late / judged, 1) if judged else None,
        "resolve_max_s": max((r["resolve_max_s"] for r in times if r["resolve_max_s"] is not None), default=None),
    }


def summary_body(*, days: int = 7, now: datetime | None = None) -> dict:
    """The summary of the last ``days`` UTC days and of the ``days`` before them, and the calls of
    the period still overdue now (``reports.worst``), masked like every notification body."""
    now = now or djtz.now()
    this = reports.Period.last_days(days, now=now)
    before = reports.Period(this.start - (this.end - this.start), this.start)
    overdue = [r for r in reports.worst(this, reports.Filters(), now=now, limit=50) if r["status"] == "overdue"]
    data = {
        "days": days,
        "period": _headline(this, now),
        "previous": _headline(before, now),
        "overdue": [
            {"run_id": r["run_id"], "call_id": r["call_id"], "tool": r["tool"], "tenant": r["tenant"], "risk_class": r["risk_class"], "deadline": format_ts(r["deadline"]), "url": call_url(r["id"])}
            for r in overdue
        ],
    }
    fields = sensitive_fields()
    values = run_sensitive_values(run_ids=sorted({r["run_id"] for r in overdue}), fields=fields)
    return {"type": TYPE, "timestamp": format_ts(now), "data": value_mask(data, fields, values)}


def summary_write(*, channels: list[str], days: int = 7, now: datetime | None = None) -> list[int]:
    """Write the summary for each channel (delivered once the transaction commits); returns the ids
    written, none for a channel that already has this period's summary."""
    known = dict(Channel.objects.filter(name__in=channels).values_list("name", "kind"))
    unknown = [c for c in channels if c not in known]
    if unknown or not channels:
        raise SummaryError(f"no notification channel named {', '.join(unknown)}" if unknown else "name at least one channel")
    body = summary_body(days=days, now=now)
    start = body["data"]["period"]["start"][:10]
    rows = [Notification(logical_key=f"summary:{days}:{start}:{c}", type=TYPE, action="trigger", channel=c, kind=known[c], body=body) for c in channels]
    with transaction.atomic():
        return rows_write(rows)


def _change(now, before, unit: str = "") -> str:
    return f"{'-' if now is None else f'{now}{unit}'} (previous: {'-' if before is None else f'{before}{unit}'})"


def summary_text(body: dict) -> str:
    """The summary in words, for e-mail and Slack: the first line is the e-mail's subject."""
    d = body.get("data", {})
    p, q = d.get("period", {}), d.get("previous", {})
    lines = [
        f"Reckon summary of the last {d.get('days')} days ({p.get('start', '')[:10]} to {p.get('end', '')[:10]} UTC)",
        f"Calls that became uncertain: {_change(p.get('uncertain'), q.get('uncertain'))}; per thousand recorded: {_change(p.get('per_thousand'), q.get('per_thousand'))}",
        f"Resolved: {_change(p.get('resolved'), q.get('resolved'))}; still open: {_change(p.get('still_open'), q.get('still_open'))}",
        f"Missed their deadline: {_change(p.get('missed_pct'), q.get('missed_pct'), '%')}",
    ]
    overdue = d.get("overdue", [])
    lines.append(f"Overdue now: {len(overdue)}" if overdue else "Overdue now: none")
    lines += [f"- {c.get('tool')} call {c.get('call_id')} in run {c.get('run_id')} ({c.get('tenant')}), deadline {c.get('deadline')} {c.get('url')}" for c in overdue]
    return "\n".join(lines)
