"""The reports screen and its CSV files: thin callers of recovery.reports (the figures) and
access.reports (who sees which table, the detail export masked and recorded), as the API is."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Iterator
from datetime import timedelta

from django.core.exceptions import PermissionDenied
from django.http import Http404, StreamingHttpResponse
from django.utils import timezone
from django.utils.http import content_disposition_header
from django.views.decorators.http import require_GET

from access.models import AccessRecord
from access.reports import report_detail_shown, report_tables
from access.roles import requires
from access.tokens import principal_for_user
from console import forms, svg
from console.views import _render
from recovery import reports
from runs.fold import format_ts

# The tables the screen loads after the page, each its own request (``report_table``): each ranks
# every call's times, in a statement of its own (docs/reports.md, "Speed"), so the headline figures
# and the trend do not wait for them. Their headings, on the screen and on the page of their own.
DEFERRED = {
    "times-by-risk": "Time to first human touch and to resolution, by risk class",
    "times-by-tool": "Time to first human touch and to resolution, by tool",
    "people": "Who decided, and how long calls waited while held",
}
TREND_SERIES = (("opened", "opened"), ("resolved", "resolved"), ("overdue_at_end", "overdue"))
# Okabe-Ito, as the overview's palette: blue, green and vermillion stay apart for colour-blind readers.
TREND_COLOURS = {"opened": "#0072B2", "resolved": "#009E73", "overdue": "#D55E00"}


def report_params(request) -> tuple[forms.ReportForm, reports.Period | None, reports.Filters | None, str]:
    """The period and filters the address asks for, or the words saying what is wrong with them."""
    form = forms.ReportForm(request.GET)
    if not form.is_valid():
        return form, None, None, " ".join(f"{form[n].label}: {' '.join(e)}" for n, e in form.errors.items())
    d = form.cleaned_data
    try:
        period = reports.Period.choose(days=d["days"], since=d["since"], until=d["until"], now=timezone.now())
        filters = reports.Filters(tenant=d["tenant"], tool=d["tool"], risk_class=d["risk_class"], team=d["team"])
    except reports.ReportError as exc:
        return form, None, None, str(exc)
    return form, period, filters, ""


def _trend_chart(rows: list[dict], period: reports.Period) -> tuple:
    drawn = [r for r in rows if r["overdue_at_end"] is not None]
    daily = len(period.buckets()) == (period.end - period.start).days
    labels = [r["start"].strftime("%b %-d") for r in drawn]
    series = {name: [r[key] for r in drawn] for key, name in TREND_SERIES}
    title = f"Uncertain calls per {'day' if daily else 'week'}, {period.start:%Y-%m-%d} to {period.end - timedelta(days=1):%Y-%m-%d} (UTC days): opened, resolved, and overdue at the end of each"
    # Drawn 480 wide with 14 px text: a phone scales it to about two thirds, and the text stays about 9 px.
    return svg.line_chart(labels=labels, series=series, title=title, width=480, height=240, font_size=14, colours=TREND_COLOURS), daily


def _period_shown(period: reports.Period, now) -> dict:
    """What the screen and a table's page of its own say of the period: its first and last UTC day and its as-of."""
    return {"period": period, "last_day": period.end - timedelta(days=1), "as_of": period.as_of(now)}


@requires("view_console", "view_reports")
@require_GET
def reports_screen(request):
    form, period, filters, error = report_params(request)
    ctx = {"form": form, "error": error, "teams": reports.teams(), "query": request.GET.urlencode(), "days": request.GET.get("days") or "30", "titles": DEFERRED}
    if period is None:
        return _render(request, "console/reports.html", ctx, nav="reports", status=400)
    now = timezone.now()
    allowed = report_tables(principal_for_user(request.user))
    tables = reports.tables([t for t in allowed if t not in DEFERRED], period, filters, now=now)
    chart, daily = _trend_chart(tables["trend"], period)
    ctx |= _period_shown(period, now) | {"t": tables, "chart": chart, "daily": daily, "deferred": [t for t in DEFERRED if t in allowed]}
    return _render(request, "console/reports.html", ctx, nav="reports")


@requires("view_console", "view_reports")
@require_GET
def report_table(request, table: str):
    """One of the tables the screen loads after the page (``DEFERRED``): the table alone for the
    screen's htmx request, or a page of its own for a link opened without it."""
    if table not in DEFERRED:
        raise Http404(f"no report table {table!r} loads on its own: one of {', '.join(DEFERRED)}")
    if table not in report_tables(principal_for_user(request.user)):
        raise PermissionDenied("the per-person table is for managers and administrators")
    form, period, filters, error = report_params(request)
    if period is None:
        return _render(request, "400.html", {"exception": error}, status=400)
    now = timezone.now()
    ctx = {"table": table, "title": DEFERRED[table], "rows": reports.TABLES[table](period, filters, now=now), "query": request.GET.urlencode()}
    if request.htmx:
        return _render(request, "console/_report_deferred.html", ctx)
    return _render(request, "console/report_table.html", ctx | _period_shown(period, now), nav="reports")


def csv_cell(value) -> str:
    """A CSV cell: ISO 8601 UTC for times (``format_ts``), JSON for structures, empty for none."""
    if value is None:
        return ""
    if hasattr(value, "tzinfo"):
        return format_ts(value)
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    return str(value)


def csv_chunks(columns: Iterable[str], chunks: Iterable[list[dict]]) -> Iterator[bytes]:
    """UTF-8 CSV with a header row, one piece per chunk of rows, for a streamed answer."""
    buf = io.StringIO(newline="")
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    for rows in chunks:
        for r in rows:
            w.writerow([csv_cell(r.get(c)) for c in columns])
        yield buf.getvalue().encode("utf-8")
        buf.seek(0)
        buf.truncate()
    if buf.tell():
        yield buf.getvalue().encode("utf-8")


@requires("view_console", "view_reports")
@require_GET
def report_csv(request, table: str):
    """One table of the report as CSV, or ``calls``: one row per call, streamed, masked for the reader."""
    if table not in reports.COLUMNS:
        raise Http404(f"no report table {table!r}: one of {', '.join(reports.COLUMNS)}")
    who = principal_for_user(request.user)
    if table != "calls" and table not in report_tables(who):
        raise PermissionDenied("the per-person table is for managers and administrators")
    form, period, filters, error = report_params(request)
    if period is None:
        return _render(request, "400.html", {"exception": error}, status=400)
    now = timezone.now()
    if table == "calls":
        chunks = report_detail_shown(period=period, filters=filters, now=now, who=who, route=request.get_full_path(), front_end=AccessRecord.FrontEnd.EXPORT)
    else:
        chunks = iter([reports.TABLES[table](period, filters, now=now)])
    resp = StreamingHttpResponse(csv_chunks(reports.COLUMNS[table], chunks), content_type="text/csv; charset=utf-8")
    name = f"reckon-{table}-{period.start:%Y-%m-%d}-to-{period.end - timedelta(days=1):%Y-%m-%d}.csv"  # both days included
    resp["Content-Disposition"] = content_disposition_header(True, name)
    return resp
