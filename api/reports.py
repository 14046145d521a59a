"""The reports' figures as JSON (``GET /api/reports/{table}``): thin callers of recovery.reports and
access.reports, the functions the console's reports screen and CSV files call, so a figure is
computed once. Tokens need the ``reports`` scope; a session needs the view_reports permission. The
per-person table is for managers and administrators signed in (access.reports.report_tables), and a
token limited to tenants counts only the runs it may see (access.tenancy.runs_visible)."""

from __future__ import annotations

from datetime import date, datetime
from typing import Any, Literal

from django.http import HttpRequest
from django.utils import timezone
from ninja import Field, Path, Query, Router, Schema

from access.reports import report_tables
from access.tenancy import runs_visible
from access.tokens import Principal
from api.auth import caller
from api.errors import Forbidden, Unprocessable
from api.schemas import clean_name, responses
from recovery import reports

router = Router(tags=["reports"])
Table = Literal[tuple(reports.TABLES)]  # the names recovery.reports gives its tables


class ReportQuery(Schema):
    days: Literal[7, 30, 90] | None = Field(None, description="the last 7, 30 or 90 UTC days, today included (30 when no dates are given)")
    since: date | None = Field(None, description="first UTC day (with until)")
    until: date | None = Field(None, description="last UTC day, included (with since)")
    tenant: str | None = None
    tool: str | None = None
    risk_class: Literal["read_only", "idempotent", "reversible", "irreversible"] | None = None
    team: str | None = Field(None, description="a group of people: calls they held or decided")


class ReportOut(Schema):
    table: str
    start: datetime = Field(..., description="the period's first instant (UTC)")
    end: datetime = Field(..., description="the instant after its last (UTC)")
    as_of: datetime = Field(..., description="figures are as of min(end, now)")
    columns: list[str]
    rows: list[dict[str, Any]]


@router.get("/reports/{table}", response=responses({200: ReportOut}), auth=caller("reports"), summary="One table of the reports")
def report_view(request: HttpRequest, table: Table = Path(...), q: Query[ReportQuery] = None):
    """One table of the reports for the period and filters asked (docs/reports.md says how each
    figure is computed): the same figures as the console's reports screen and its CSV files."""
    principal: Principal = request.auth
    if table not in report_tables(principal):
        raise Forbidden("the per-person table is for managers and administrators signed in")
    for name in ("tenant", "tool", "team"):
        if getattr(q, name) is not None:
            clean_name(getattr(q, name), name)
    now = timezone.now()
    tenants = principal.tenants
    try:
        period = reports.Period.choose(days=q.days, since=q.since, until=q.until, now=now)
        filters = reports.Filters(
            tenant=q.tenant or "", tool=q.tool or "", risk_class=q.risk_class or "", team=q.team or "",
            scope=None if tenants is None else (lambda qs, field: runs_visible(qs, tenants, field)),
        )  # fmt: skip
    except reports.ReportError as exc:
        raise Unprocessable(str(exc)) from None
    rows = reports.TABLES[table](period, filters, now=now)
    return {"table": table, "start": period.start, "end": period.end, "as_of": period.as_of(now), "columns": list(reports.COLUMNS[table]), "rows": rows}
