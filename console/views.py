"""Console screens. Thin: each view checks the role, calls a selector or a service, and renders one
template (or the named partial of it that htmx asked for)."""

from __future__ import annotations

import base64
import hashlib

from django.contrib import messages
from django.contrib.admin.models import LogEntry
from django.contrib.auth import views as auth_views
from django.contrib.contenttypes.models import ContentType
from django.http import Http404, HttpResponse, HttpResponseBadRequest
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from runs.errors import RunNotFound
from runs.models import Run
from runs.selectors import run_get, run_state

from console import selectors, services
from console.roles import perm, requires, role_names


def _render(request, template: str, ctx: dict, *, nav: str = "", partial: str | None = None, status: int = 200):
    ctx = {"roles": role_names(request.user), "nav": nav, **ctx}
    name = f"{template}#{partial}" if partial else template
    return render(request, name, ctx, status=status)


def _int(request, name: str, *, default=None, minimum: int = 0):
    raw = request.GET.get(name, "")
    if raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadParam(f"{name} must be a whole number, got {raw!r}") from None
    if value < minimum:
        raise BadParam(f"{name} must be at least {minimum}, got {value}")
    return value


class BadParam(Exception):
    pass


def _bad(request, exc: Exception):
    return HttpResponseBadRequest(f"Bad request: {exc}", content_type="text/plain; charset=utf-8")


# --- sign-in ---------------------------------------------------------------------------------


class LoginView(auth_views.LoginView):
    template_name = "registration/login.html"
    redirect_authenticated_user = False


def logout_view(request):
    return auth_views.LogoutView.as_view(next_page="console:login")(request)


@requires()
def home(request):
    if request.user.has_perm(perm("view_console")):
        return redirect("console:overview" if request.user.groups.filter(name="manager").exists() else "console:queue")
    if request.user.has_perm(perm("manage_policies")):
        return redirect("console:policies")
    return _render(request, "403.html", {"exception": "your account is in no console group"}, status=403)


# --- runs ------------------------------------------------------------------------------------


def _shown(events, fields: frozenset[str]):
    """Attach the masked payload and the maskable paths to each event row for the template."""
    for e in events:
        e.shown = selectors.value_mask(e.payload, fields)
        e.masked = selectors.masked_paths(e.payload, fields)
    return events


@requires("view_console")
@require_GET
def runs_list(request):
    q = request.GET.get("q", "").strip()[:200]
    page = selectors.runs_page(q=q, after=request.GET.get("after") or None)
    partial = "rows" if request.htmx else None
    return _render(request, "console/runs.html", {"page": page, "q": q}, nav="runs", partial=partial)


@requires("view_console")
@require_GET
def run_detail(request, run_id: str):
    try:
        run = run_get(run_id=run_id)
        before = _int(request, "before", minimum=1)
        at = _int(request, "at", minimum=1)
    except RunNotFound as exc:
        raise Http404(str(exc))
    except BadParam as exc:
        return _bad(request, exc)
    types = [t for t in request.GET.getlist("type") if t in selectors.ALL_TYPES]
    fields = selectors.sensitive_fields()
    page = selectors.run_events_page(run_id=run_id, types=types, before=before)
    _shown(page.items, fields)
    ctx = {
        "run": run,
        "page": page,
        "types": types,
        "record_only": selectors.RECORD_ONLY_TYPES,
        "can_reveal": request.user.has_perm(perm("view_sensitive")),
    }
    if request.htmx and before is not None:
        return _render(request, "console/run.html", ctx, partial="timeline")
    state, state_error = None, None
    if at is not None:
        state, state_error = _state_at(run, at, fields)
    counts = selectors.run_type_counts(run_id=run_id)
    ctx.update(
        {
            "at": at,
            "state": state,
            "state_error": state_error,
            "type_counts": sorted(counts.items()),
            "decisions": _shown(selectors.run_decisions(run_id=run_id), fields),
            "reveals": LogEntry.objects.filter(content_type=ContentType.objects.get_for_model(Run), object_id=run_id, change_message__startswith=services.REVEAL_PREFIX).select_related("user").order_by("-action_time")[:50],
            "can_export": request.user.has_perm(perm("export_run")),
            "export_masked": bool(selectors.mask_for(request.user)),
        }
    )
    return _render(request, "console/run.html", ctx, nav="runs")


def _state_at(run, at: int, fields):
    if at > run.last_seq:
        return None, f"seq {at} is past the run's last event ({run.last_seq})"
    return selectors.value_mask(run_state(run_id=run.run_id, at=at).to_dict(), fields), None


@requires("view_console")
@require_GET
def run_state_view(request, run_id: str):
    try:
        run = run_get(run_id=run_id)
        at = _int(request, "at", default=None, minimum=1)
    except RunNotFound as exc:
        raise Http404(str(exc))
    except BadParam as exc:
        return _bad(request, exc)
    state, error = _state_at(run, at or run.last_seq, selectors.sensitive_fields()) if run.last_seq else (None, "the run has no events")
    ctx = {"run": run, "at": at, "state": state, "state_error": error}
    if request.htmx:
        return _render(request, "console/run.html", ctx, partial="state")
    return redirect(f"{request.path.rsplit('/state', 1)[0]}/?at={at or run.last_seq}#state-h")


def _export(request, run_id: str, fmt: str):
    if fmt not in ("jsonl", "csv"):
        raise Http404(f"no export format {fmt!r}: use jsonl or csv")
    try:
        run_get(run_id=run_id)
    except RunNotFound as exc:
        raise Http404(str(exc))
    fields = selectors.mask_for(request.user)
    body, digest = selectors.run_export(run_id=run_id, fmt=fmt, fields=fields)
    return body, digest, fields


@requires("view_console", "export_run")
@require_GET
def run_export(request, run_id: str, fmt: str):
    body, digest, fields = _export(request, run_id, fmt)
    if not fields and selectors.sensitive_fields():
        services.export_record(user=request.user, run_id=run_id, fmt=fmt, digest=digest)
    ctype = "application/x-ndjson" if fmt == "jsonl" else "text/csv"
    resp = HttpResponse(body, content_type=f"{ctype}; charset=utf-8")
    resp["Content-Disposition"] = f'attachment; filename="{run_id}.{fmt}"'
    resp["Content-Digest"] = f"sha-256=:{base64.b64encode(hashlib.sha256(body).digest()).decode()}:"
    resp["X-Reckon-SHA256"] = digest
    return resp


@requires("view_console", "export_run")
@require_GET
def run_export_digest(request, run_id: str, fmt: str):
    _, digest, _ = _export(request, run_id, fmt)
    return HttpResponse(f"{digest}  {run_id}.{fmt}\n", content_type="text/plain; charset=utf-8")


@requires("view_console", "view_sensitive")
@require_POST
def reveal(request, run_id: str, seq: int):
    path = request.POST.get("path", "")
    try:
        value = services.sensitive_reveal(user=request.user, run_id=run_id, seq=seq, path=path, fields=selectors.sensitive_fields())
    except services.RevealRefused as exc:
        return _bad(request, exc)
    ctx = {"run_id": run_id, "seq": seq, "path": path, "value": value}
    return _render(request, "console/reveal.html", ctx, partial="value" if request.htmx else None)


# --- placeholders until the recovery engine's screens land ------------------------------------


@requires("view_console")
@require_GET
def overview(request):
    return _render(request, "console/overview.html", {}, nav="overview")


@requires("view_console")
@require_GET
def queue(request):
    return _render(request, "console/queue.html", {}, nav="queue")


@requires("view_console")
@require_GET
def decisions(request):
    return _render(request, "console/decisions.html", {}, nav="decisions")


@requires("manage_policies")
@require_GET
def policies(request):
    return _render(request, "console/policies.html", {}, nav="policies")
