"""Console screens for finding things: the navigation's search and its open-call badge.

Kept apart from ``console.views`` (the screens of one run or call); thin in the same way: check the
role, call ``console.search`` or a selector, record what must be recorded, render.
"""

from __future__ import annotations

from django.views.decorators.http import require_GET

from access.masking import mask_for
from access.models import AccessRecord
from access.roles import requires, role_names
from access.services import access_record_write
from access.tokens import principal_for_user
from console import search as finder
from console import selectors
from django.shortcuts import render
from recovery import masking
from recovery.models import UncertainCall


def _render(request, template: str, ctx: dict, *, status: int = 200, partial: str | None = None):
    ctx = {"roles": role_names(request.user), "nav": "search", **ctx}
    return render(request, f"{template}#{partial}" if partial else template, ctx, status=status)


@requires("view_console")
@require_GET
def search(request):
    """Runs, calls and decisions matching ``q``, grouped by kind. A sensitive argument value that
    matched is shown to a searcher who may see it, and recorded in the access record first."""
    raw = request.GET.get("q", "")
    if not raw.strip():
        return _render(request, "console/search.html", {"q": "", "results": None})
    try:
        q = finder.query_clean(raw)
    except finder.SearchError as exc:
        return _render(request, "console/search.html", {"q": raw[: finder.MAX_CHARS], "results": None, "error": str(exc)}, status=400)
    sensitive = masking.sensitive_fields()
    res = finder.search(q=q, fields=mask_for(request.user), sensitive=sensitive)
    who = None
    for hit in res.calls:
        if hit.revealed:
            who = who or principal_for_user(request.user)
            access_record_write(
                who=who,
                front_end=AccessRecord.FrontEnd.CONSOLE,
                run_id=hit.call.run_id,
                # Not the text searched for: it matched the value, so it is (part of) the value.
                why="console search: the argument that matched the text searched for is shown",
                fields=[f"arguments.{k}" for k in hit.revealed],
                call_id=hit.call.call_id,
                idempotency_key=hit.call.idempotency_key,
            )
    selectors.events_shown(res.decisions, sensitive)
    return _render(request, "console/search.html", {"q": q, "results": res})


@requires("view_console")
@require_GET
def open_badge(request):
    """The navigation's count of calls in doubt (open, reconciling, escalated), polled by htmx."""
    n = UncertainCall.objects.unresolved().count()
    return render(request, "console/_open_badge.html", {"open_count": n})
