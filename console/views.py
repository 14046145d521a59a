"""Console screens. Thin: each view checks the role, calls a selector or a service, and renders one
template (or the named partial of it that htmx asked for)."""

from __future__ import annotations

import base64
import hashlib
from datetime import datetime
from datetime import time as dtime
from datetime import timezone as dt_timezone

from django.contrib import messages
from django.contrib.admin.models import LogEntry
from django.contrib.auth import get_user_model
from django.contrib.auth import views as auth_views
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponse, HttpResponseBadRequest, QueryDict
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from access.masking import mask_for
from access.roles import perm, requires, role_names
from console import forms, selectors, services, svg
from recovery import decisions as actions
from recovery import masking
from recovery.errors import CallNotFound, NotDecidable, RecoveryError, RunBusy, StaleDecision
from recovery.models import Decision, PolicyChange, ToolPolicy, UncertainCall
from recovery.policies import PolicyError
from recovery.policy_changes import policy_update
from recovery.selectors import (
    QueryError,
    policy_for,
    queue_figures_by_risk,
    uncertain_call_evidence,
    uncertain_calls_filter,
)
from runs.errors import RunNotFound
from runs.models import Run
from runs.selectors import run_get, run_state


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
        e.shown = masking.value_mask(e.payload, fields)
        e.masked = masking.masked_paths(e.payload, fields)
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
    fields = masking.sensitive_fields()
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
            "export_masked": bool(mask_for(request.user)),
        }
    )
    return _render(request, "console/run.html", ctx, nav="runs")


def _state_at(run, at: int, fields):
    if at > run.last_seq:
        return None, f"seq {at} is past the run's last event ({run.last_seq})"
    return masking.value_mask(run_state(run_id=run.run_id, at=at).to_dict(), fields), None


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
    state, error = _state_at(run, at or run.last_seq, masking.sensitive_fields()) if run.last_seq else (None, "the run has no events")
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
    fields = mask_for(request.user)
    body, digest = selectors.run_export(run_id=run_id, fmt=fmt, fields=fields)
    return body, digest, fields


@requires("view_console", "export_run")
@require_GET
def run_export(request, run_id: str, fmt: str):
    body, digest, fields = _export(request, run_id, fmt)
    if not fields and masking.sensitive_fields():
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
        value = services.sensitive_reveal(user=request.user, run_id=run_id, seq=seq, path=path, fields=masking.sensitive_fields())
    except services.RevealRefused as exc:
        return _bad(request, exc)
    ctx = {"run_id": run_id, "seq": seq, "path": path, "value": value}
    return _render(request, "console/reveal.html", ctx, partial="value" if request.htmx else None)


# --- overview --------------------------------------------------------------------------------


# The overview names this many of the most overdue irreversible calls and links to the queue for the rest.
OVERVIEW_OVERDUE_SHOWN = 50


@requires("view_console")
@require_GET
def overview(request):
    now = timezone.now()
    # One scan of the unresolved calls feeds the figures, the chart and the histogram.
    tally = selectors.overview_tally(now=now)
    figures = queue_figures_by_risk(now=now, overdue_limit=OVERVIEW_OVERDUE_SHOWN, tally=tally)
    labels, series = selectors.open_calls_over_time(now=now, tally=tally)
    hist = selectors.open_calls_age_histogram(now=now, tally=tally)
    irreversible = figures.get("irreversible", {})
    ctx = {
        "figures": figures,
        "overdue_irreversible": irreversible.get("overdue", []),
        "overdue_irreversible_count": irreversible.get("overdue_count", 0),
        "overdue_other_count": sum(f["overdue_count"] for c, f in figures.items() if c != "irreversible"),
        "chart_time": svg.line_chart(labels=labels, series=series, title="Open uncertain calls by risk class, last 24 hours (UTC)"),
        "chart_rows": [(labels[i], [series[c][i] for c in series]) for i in range(len(labels))],
        "chart_classes": list(series),
        "chart_age": svg.bar_chart(bars=hist, title="Age of open uncertain calls"),
        "hist": hist,
        "now": now,
    }
    return _render(request, "console/overview.html", ctx, nav="overview", partial="figures" if request.htmx else None)


# --- queue -----------------------------------------------------------------------------------


def _queue_page(request):
    form = forms.QueueFilterForm(request.GET)
    if not form.is_valid():
        return form, None, "; ".join(f"{k}: {' '.join(v)}" for k, v in form.errors.items())
    try:
        page = uncertain_calls_filter(**form.selector_kwargs(), after=request.GET.get("after") or None, limit=form.cleaned_data.get("limit") or 50)
    except QueryError as exc:
        return form, None, str(exc)
    return form, page, None


def _filter_query(request, *, drop=("after",)) -> str:
    q = request.GET.copy()
    for k in drop:
        q.pop(k, None)
    return q.urlencode()


@requires("view_console")
@require_GET
def queue(request):
    form, page, error = _queue_page(request)
    fields = masking.sensitive_fields()
    if page is not None:
        for row in page.items:
            row.shown_arguments = masking.value_mask(row.arguments, fields)
    ctx = {
        "form": form,
        "page": page,
        "error": error,
        "filters": _filter_query(request),
        "full_query": request.GET.urlencode(),
        "can_claim": request.user.has_perm(perm("claim_call")),
        "can_bulk": request.user.has_perm(perm("claim_call")) or request.user.has_perm(perm("decide_call")),
        "bulk_actions": _bulk_actions_for(request.user),
    }
    status = 400 if error else 200
    return _render(request, "console/queue.html", ctx, nav="queue", partial="results" if request.htmx else None, status=status)


def _bulk_actions_for(user) -> dict[str, str]:
    allowed = {}
    for key, label in forms.BULK_ACTIONS.items():
        needs = "claim_call" if key in ("claim", "assign") else "decide_call"
        if user.has_perm(perm(needs)):
            allowed[key] = label
    return allowed


@requires("view_console")
@require_POST
def queue_bulk(request):
    form = forms.BulkForm(request.POST)
    allowed = _bulk_actions_for(request.user)
    if not form.is_valid():
        return _render(request, "console/bulk.html", {"form": form, "errors": form.errors, "filters": request.POST.get("filters", "")}, nav="queue", status=400)
    action = form.cleaned_data["action"]
    if action not in allowed:
        raise PermissionDenied(f"your role may not {forms.BULK_ACTIONS[action].lower()}")
    filters = request.POST.get("filters", "")
    if form.cleaned_data["scope"] == "all":
        rows = _all_matching(filters)
    else:
        ids = form.cleaned_data["ids"][: services.BULK_LIMIT]
        by_pk = UncertainCall.objects.in_bulk(ids)
        rows = [by_pk[i] for i in ids if i in by_pk]
    ctx = {"form": form, "action": action, "action_label": forms.BULK_ACTIONS[action], "filters": filters, "assignee": form.cleaned_data.get("assignee", ""), "reason": form.cleaned_data.get("reason", "")}
    if form.cleaned_data["step"] == "preview":
        ctx["preview"] = services.bulk_preview(rows=rows, action=action, user=request.user, assignee=form.cleaned_data.get("assignee", ""))
        ctx["will_apply"] = sum(1 for p in ctx["preview"] if p["ok"])
        return _render(request, "console/bulk.html", ctx, nav="queue")
    seen = {}
    for key, value in request.POST.items():
        if key.startswith("v_") and key[2:].isdigit() and value.isdigit():
            seen[int(key[2:])] = int(value)
    ctx["results"] = services.bulk_apply(rows=rows, seen=seen, action=action, user=request.user, assignee=form.cleaned_data.get("assignee", ""), reason=form.cleaned_data.get("reason", ""))
    ctx["applied"] = sum(1 for r in ctx["results"] if r["ok"])
    return _render(request, "console/bulk.html", ctx, nav="queue")


def _all_matching(filters: str) -> list:
    """Every call the queue's filter matches, page by page, up to the bulk limit."""
    form = forms.QueueFilterForm(QueryDict(filters))
    if not form.is_valid():
        raise BadParam("the filter is not valid: " + "; ".join(f"{k}: {' '.join(v)}" for k, v in form.errors.items()))
    rows, after = [], None
    while len(rows) < services.BULK_LIMIT:
        page = uncertain_calls_filter(**form.selector_kwargs(), after=after, limit=200)
        rows.extend(page.items)
        if page.next_cursor is None:
            break
        after = page.next_cursor
    return rows[: services.BULK_LIMIT]


# --- one call: the approval screen ------------------------------------------------------------


def _call_or_404(pk: int):
    try:
        return uncertain_call_evidence(pk=pk)
    except CallNotFound as exc:
        raise Http404(str(exc))


def _call_context(request, pk: int, *, decision_form=None, note_form=None) -> dict:
    ev = _call_or_404(pk)
    call = ev["call"]
    fields = masking.sensitive_fields()
    policy = policy_for(call.tool)
    attempts = ev["attempts"]
    for a in attempts:
        a["shown_evidence"] = masking.value_mask(a["evidence"], fields)
        a["shown_error"] = masking.value_mask(a["error"], fields)  # an error may quote the receiver's JSON
        a["comparison"] = [
            {**r, "intended": masking.MASK if r["field"] in fields else r["intended"], "observed": masking.MASK if r["field"] in fields else r["observed"]}
            for r in selectors.comparison_rows(a["evidence"])
        ]
    conflict = next((a for a in reversed(attempts) if a["outcome"] == "conflict"), None)
    recent = selectors.run_events_page(run_id=call.run_id, limit=12)
    _shown(recent.items, fields)
    arguments = call.arguments if isinstance(call.arguments, dict) else {"(arguments)": call.arguments}
    not_decidable = call.decidable()  # shown in place of the form: decision_record refuses with it
    can_decide = request.user.has_perm(perm("decide_call")) and not_decidable is None
    return {
        "call": call,
        "last_error": masking.value_mask(call.last_error, fields),
        "policy": policy,
        "attempts": attempts,
        "conflict": conflict,
        "history": [{**h, "shown": masking.value_mask(h["payload"], fields)} for h in ev["history"]],
        "notes": selectors.call_notes(history=ev["history"]),
        "arguments": [(k, masking.MASK if k in fields and v is not None else v, k in fields and v is not None) for k, v in arguments.items()],
        "recent": recent.items,
        "can_decide": can_decide,
        "not_decidable": not_decidable,
        "can_claim": request.user.has_perm(perm("claim_call")) and call.state != "resolved",
        "can_note": request.user.has_perm(perm("add_note")),
        "can_reveal": request.user.has_perm(perm("view_sensitive")),
        "decision_form": decision_form or forms.DecisionForm(initial={"seen_version": call.version}),
        "note_form": note_form or forms.NoteForm(),
        "has_execute": policy.execute is not None,
        "has_compensate": policy.compensate is not None,
    }


@requires("view_console")
@require_GET
def call_detail(request, pk: int):
    return _render(request, "console/call.html", _call_context(request, pk), nav="queue")


@requires("view_console", "decide_call")
@require_POST
def call_decide(request, pk: int):
    form = forms.DecisionForm(request.POST)
    if not form.is_valid():
        ctx = _call_context(request, pk, decision_form=form)
        return _render(request, "console/call.html", ctx, nav="queue", status=400)
    d = form.cleaned_data
    try:
        row = actions.decision_record(pk=pk, decision=d["decision"], by=request.user, reason=d["reason"], seen_version=d["seen_version"], evidence_ref=(d.get("evidence_ref") or None))
        if d["decision"] == Decision.ESCALATE and d.get("assignee"):
            actions.call_assign(pk=pk, user=request.user, assignee=d["assignee"], seen_version=row.version)
    except CallNotFound as exc:
        raise Http404(str(exc))
    except StaleDecision as exc:
        messages.error(request, f"Your decision was not recorded: someone else acted on this call first ({exc}). Read what changed below, then decide again if it is still needed.")
        ctx = _call_context(request, pk)
        return _render(request, "console/call.html", {**ctx, "stale": True}, nav="queue", status=409)
    except NotDecidable as exc:
        # The same reason the API gives (409 not_decidable); the page shows it in place of the form.
        messages.error(request, f"Your decision was not recorded. {exc}")
        return _render(request, "console/call.html", _call_context(request, pk), nav="queue", status=409)
    except RunBusy as exc:
        messages.error(request, f"Your decision was not recorded: {exc}.")
        return _render(request, "console/call.html", _call_context(request, pk, decision_form=form), nav="queue", status=409)
    except RecoveryError as exc:
        messages.error(request, f"Your decision was not recorded: {exc}.")
        return _render(request, "console/call.html", _call_context(request, pk, decision_form=form), nav="queue", status=400)
    messages.success(request, f"Recorded: {Decision(d['decision']).label}. The call is now {row.state}{' (' + row.disposition + ')' if row.disposition else ''}.")
    return redirect("console:call", pk=pk)


def _call_write(request, pk: int, fn, ok: str):
    try:
        seen = int(request.POST.get("seen_version", ""))
    except ValueError:
        return _bad(request, BadParam("seen_version must be the version number shown on the page"))
    try:
        fn(seen)
    except CallNotFound as exc:
        raise Http404(str(exc))
    except StaleDecision:
        messages.error(request, "Not done: the call changed since you loaded the page (someone else may have claimed or decided it). Here it is as it is now.")
    except RecoveryError as exc:
        messages.error(request, f"Not done: {exc}.")
    else:
        messages.success(request, ok)
    nxt = request.POST.get("next", "")
    return redirect(nxt if nxt.startswith("/queue/") else f"/calls/{pk}/")


@requires("view_console", "claim_call")
@require_POST
def call_claim(request, pk: int):
    return _call_write(request, pk, lambda v: actions.call_claim(pk=pk, user=request.user, seen_version=v), "You have claimed this call.")


@requires("view_console", "claim_call")
@require_POST
def call_release(request, pk: int):
    return _call_write(request, pk, lambda v: actions.call_release(pk=pk, user=request.user, seen_version=v), "You have released this call.")


@requires("view_console", "claim_call")
@require_POST
def call_assign(request, pk: int):
    form = forms.AssignForm(request.POST)
    if not form.is_valid():
        return _bad(request, BadParam("name the person to assign the call to"))
    name = form.cleaned_data["assignee"].strip()
    if not get_user_model().objects.filter(username=name, is_active=True).exists():
        messages.error(request, f"Not assigned: there is no active user {name!r}.")
        return redirect("console:call", pk=pk)
    return _call_write(request, pk, lambda v: actions.call_assign(pk=pk, user=request.user, assignee=name, seen_version=v), f"Assigned to {name}.")


@requires("view_console", "add_note")
@require_POST
def call_note(request, pk: int):
    form = forms.NoteForm(request.POST)
    if not form.is_valid():
        return _render(request, "console/call.html", _call_context(request, pk, note_form=form), nav="queue", status=400)
    try:
        actions.call_note(pk=pk, by=request.user, text=form.cleaned_data["text"])
    except CallNotFound as exc:
        raise Http404(str(exc))
    except RecoveryError as exc:
        messages.error(request, f"The note was not saved: {exc}.")
    else:
        messages.success(request, "Note added to the run's log.")
    return redirect("console:call", pk=pk)


# --- decision log ----------------------------------------------------------------------------


@requires("view_console")
@require_GET
def decisions(request):
    g = request.GET
    before = g.get("before") or None
    try:
        if before is not None:
            selectors.decision_cursor_parse(before)
    except ValueError as exc:
        return _bad(request, BadParam(str(exc)))
    try:
        since = datetime.combine(datetime.strptime(g["since"], "%Y-%m-%d").date(), dtime.min, tzinfo=dt_timezone.utc) if g.get("since") else None
        until = datetime.combine(datetime.strptime(g["until"], "%Y-%m-%d").date(), dtime.max, tzinfo=dt_timezone.utc) if g.get("until") else None
    except ValueError as exc:
        return _bad(request, BadParam(f"dates are YYYY-MM-DD: {exc}"))
    q = {k: g.get(k, "").strip()[:200] for k in ("by", "tool", "tenant", "disposition", "kind")}
    page = selectors.decisions_search(**q, since=since, until=until, before=before)
    _shown(page.items, masking.sensitive_fields())
    ctx = {"page": page, "q": q, "since": g.get("since", ""), "until": g.get("until", ""), "filters": _filter_query(request, drop=("before",))}
    return _render(request, "console/decisions.html", ctx, nav="decisions", partial="rows" if request.htmx and before else None)


# --- policies (administrators) -----------------------------------------------------------------


@requires("manage_policies")
def policies(request):
    if request.method == "POST":
        tool = request.POST.get("tool", "").strip()
        fields = {}
        for name in ("risk_class", "strategy", "deadline"):
            if request.POST.get(name, "").strip():
                fields[name] = request.POST[name].strip()
        for name in ("semantic_fields", "sensitive_fields"):
            if name in request.POST:
                fields[name] = [f.strip() for f in request.POST[name].split(",") if f.strip()]
        try:
            policy_update(tool=tool, fields=fields, by=request.user)
        except PolicyError as exc:
            messages.error(request, f"Policy not changed: {exc}")
            return redirect("console:policies")
        messages.success(request, f"Policy for {tool} saved.")
        return redirect("console:policies")
    ctx = {"policies": ToolPolicy.objects.order_by("tool"), "changes": PolicyChange.objects.order_by("-at", "-id")[:30]}
    return _render(request, "console/policies.html", ctx, nav="policies")
