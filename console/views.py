"""Console screens. Thin: each view checks the role, calls a selector or a service, and renders one
template (or the named partial of it that htmx asked for)."""

from __future__ import annotations

import json

from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponse, QueryDict, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.urls import reverse
from django.utils.http import content_disposition_header
from django.views.decorators.http import require_GET, require_POST

from access import assignment
from access import selectors as access_selectors
from access.models import AccessRecord
from access.masking import mask_for, masks_sensitive, may_reveal_on_call
from access.roles import MANAGER, perm, requires, role_names
from console import decision_log, forms, paging, selectors, services, svg
from console.models import UserPreference
from console.zones import ZONE_KEY
from notify import selectors as notify_selectors
from recovery import masking
from recovery.errors import CallNotFound
from recovery.policies import PolicyError
from recovery.policy_changes import policy_update
from recovery.selectors import (
    QueryError,
    queue_figures_by_risk,
    uncertain_call_evidence,
    uncertain_calls_count,
    uncertain_calls_filter,
)
from runs.errors import RunNotFound
from runs.selectors import run_get


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
    """A request the screen cannot serve as asked: the console's 400 page, naming what was wrong."""
    return _render(request, "400.html", {"exception": str(exc)}, status=400)


def not_found(request, exc: Exception):
    """The console's 404 page with the reason (a run or call that does not exist), whatever DEBUG
    is: Django's debug page is for a developer's unknown URL, not for an operator's missing run."""
    return _render(request, "404.html", {"exception": str(exc)}, status=404)


# --- sign-in ---------------------------------------------------------------------------------


class LoginView(auth_views.LoginView):
    template_name = "registration/login.html"
    redirect_authenticated_user = False


@requires()
def home(request):
    if request.user.has_perm(perm("view_console")):
        return redirect("console:overview" if MANAGER in role_names(request.user) else "console:queue")
    if request.user.has_perm(perm("manage_policies")):
        return redirect("console:policies")
    return _render(request, "403.html", {"exception": "your account is in no console group"}, status=403)


# --- runs ------------------------------------------------------------------------------------


@requires("view_console")
@require_GET
def runs_list(request):
    q = request.GET.get("q", "").strip()[:200]
    after = request.GET.get("after") or None
    try:
        trail = paging.trail_parse(request.GET.get("trail", ""), after=after)
        page = selectors.runs_page(q=q, after=after)
    except ValueError as exc:
        return _render(request, "console/runs.html", {"page": None, "q": q, "error": str(exc)}, nav="runs", status=400)
    paging.pages_link(page, request, trail=trail, size=50, cursor_name="after")
    return _render(request, "console/runs.html", {"page": page, "q": q}, nav="runs")


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
    # Every sensitive field is masked on this screen; holders of view_sensitive reveal one at a time (recorded).
    fields = masking.sensitive_fields()
    ctx = _run_timeline_context(request, run, types=types, before=before, fields=fields)
    if request.htmx and before is not None:
        return _render(request, "console/run.html", ctx, partial="timeline")
    ctx.update(_run_screen_context(request, run, at=at, fields=fields))
    return _render(request, "console/run.html", ctx, nav="runs")


def run_screen_refused(request, run, *, evidence: dict):
    """The run screen as its own address shows it, with the evidence form as it was sent and
    ``evidence["error"]`` beside the field at fault (400): a refused bundle answers with the page
    the person asked from, their choices kept, rather than a bare error page."""
    fields = masking.sensitive_fields()
    ctx = {**_run_timeline_context(request, run, types=[], before=None, fields=fields), **_run_screen_context(request, run, at=None, fields=fields), "evidence": evidence}
    return _render(request, "console/run.html", ctx, nav="runs", status=400)


def _run_timeline_context(request, run, *, types: list[str], before: int | None, fields: frozenset[str]) -> dict:
    return {
        "run": run,
        "page": selectors.run_timeline(run_id=run.run_id, types=types, before=before, fields=fields),
        "types": types,
        "record_only": selectors.RECORD_ONLY_TYPES,
        "can_reveal": request.user.has_perm(perm("view_sensitive")),
        "expand": request.GET.get("expand") == "all",
    }


def _run_screen_context(request, run, *, at: int | None, fields: frozenset[str]) -> dict:
    state, state_error = selectors.run_state_shown(run=run, at=at, fields=fields) if at is not None else (None, None)
    return {
        "at": at,
        "state": state,
        "state_error": state_error,
        **selectors.run_audit(run_id=run.run_id, fields=fields),
        "stale_resumptions": selectors.run_stale_observations(run_id=run.run_id),
        "status": selectors.run_status(run, now=timezone.now()),
        "calls": selectors.run_calls(run_id=run.run_id),
        # Counted as the runs list counts them: a resolved call is listed below, not in doubt.
        "in_doubt": selectors.runs_open_calls([run.run_id])[run.run_id],
        "can_export": request.user.has_perm(perm("export_run")),
        "export_masked": masks_sensitive(mask_for(request.user)),
    }


def _run_at(request, run_id: str):
    """The run and the ``at`` it is asked at (None: its last event); 404 for an unknown run,
    BadParam for an ``at`` that is not a seq."""
    try:
        run = run_get(run_id=run_id)
    except RunNotFound as exc:
        raise Http404(str(exc))
    return run, _int(request, "at", default=None, minimum=1)


@requires("view_console")
@require_GET
def run_state_view(request, run_id: str):
    try:
        run, at = _run_at(request, run_id)
    except BadParam as exc:
        return _bad(request, exc)
    state, error = selectors.run_state_shown(run=run, at=at or run.last_seq, fields=masking.sensitive_fields()) if run.last_seq else (None, "the run has no events")
    ctx = {"run": run, "at": at, "state": state, "state_error": error}
    if request.htmx:
        return _render(request, "console/run.html", ctx, partial="state")
    return redirect(f"{request.path.rsplit('/state', 1)[0]}/?at={at or run.last_seq}#state-h")


@requires("view_console")
@require_GET
def run_event_json(request, run_id: str, seq: int):
    """One event's whole payload as JSON, masked as the run screen masks it: where a screen that
    cut a long payload (access.shown) sends the reader for the rest."""
    event = selectors.run_event_shown(run_id=run_id, seq=seq, fields=masking.sensitive_fields())
    if event is None:
        raise Http404(f"run {run_id!r} has no event {seq}")
    resp = HttpResponse(json.dumps(event.shown, ensure_ascii=False, indent=2, sort_keys=True), content_type="application/json; charset=utf-8")
    resp["Content-Disposition"] = content_disposition_header(False, f"{run_id}.{seq}.json")
    return resp


@requires("view_console")
@require_GET
def run_state_json(request, run_id: str):
    """The folded state after ``at`` (default: the last event) as JSON, masked as the run screen
    masks it: the rest of the state document the screen cuts."""
    try:
        run, at = _run_at(request, run_id)
    except BadParam as exc:
        return _bad(request, exc)
    if not run.last_seq:
        raise Http404(f"run {run_id!r} has no events")
    state, error = selectors.run_state_shown(run=run, at=at or run.last_seq, fields=masking.sensitive_fields())
    if error:
        return _bad(request, BadParam(error))
    resp = StreamingHttpResponse(json.JSONEncoder(ensure_ascii=False, indent=2, sort_keys=True).iterencode(state), content_type="application/json; charset=utf-8")
    resp["Content-Disposition"] = content_disposition_header(False, f"{run_id}.state.{at or run.last_seq}.json")
    return resp


def _export(request, run_id: str, fmt: str):
    """(masking fields, last seq exported) for an export of ``run_id``: seq 1..``upto``, by default
    the run's last seq when asked. Fixing the range lets the same file, and its digest, be asked
    for again while the run goes on."""
    if fmt not in selectors.EXPORT_FORMATS:
        raise Http404(f"no export format {fmt!r}: use jsonl or csv")
    try:
        run = run_get(run_id=run_id)
    except RunNotFound as exc:
        raise Http404(str(exc))
    upto = _int(request, "upto", default=run.last_seq, minimum=0)
    if upto > run.last_seq:
        raise BadParam(f"upto {upto} is beyond run {run_id!r}, whose events are seq 1..{run.last_seq}")
    return mask_for(request.user), upto


@requires("view_console", "export_run")
@require_GET
def run_export(request, run_id: str, fmt: str):
    """The run's events as a file, streamed: memory holds one chunk of events whatever the run's
    length. Its sha256 cannot be a header (it is known only after the last byte), so the answer
    links to it (``Link: <...export.jsonl.sha256?upto=N>; rel="digest"``), computed the same way
    over the same seq 1..N. An export that shows sensitive values is recorded before the first byte."""
    try:
        fields, upto = _export(request, run_id, fmt)
    except BadParam as exc:
        return _bad(request, exc)
    digest_url = f"{reverse('console:run_export_digest', args=[run_id, fmt])}?upto={upto}"
    if selectors.run_export_discloses(run_id=run_id, fields=fields, upto=upto):  # the same file fully masked differs
        services.export_record(user=request.user, run_id=run_id, route=request.get_full_path(), upto=upto, digest_url=digest_url)
    ctype = "application/x-ndjson" if fmt == "jsonl" else "text/csv"
    resp = StreamingHttpResponse(selectors.run_export_chunks(run_id=run_id, fmt=fmt, fields=fields, upto=upto), content_type=f"{ctype}; charset=utf-8")
    resp["Content-Disposition"] = content_disposition_header(True, f"{run_id}.{fmt}")
    resp["Link"] = f'<{digest_url}>; rel="digest"'
    resp["X-Reckon-Upto"] = str(upto)
    return resp


@requires("view_console", "export_run")
@require_GET
def run_export_digest(request, run_id: str, fmt: str):
    """``<sha256 hex>  <run_id>.<fmt>`` of the export of seq 1..``upto`` (default: the whole run)."""
    try:
        fields, upto = _export(request, run_id, fmt)
    except BadParam as exc:
        return _bad(request, exc)
    digest = selectors.run_export_digest(run_id=run_id, fmt=fmt, fields=fields, upto=upto)
    resp = HttpResponse(f"{digest}  {run_id}.{fmt}\n", content_type="text/plain; charset=utf-8")
    resp["X-Reckon-Upto"] = str(upto)
    return resp


@requires("view_console", "view_sensitive")
@require_POST
def reveal(request, run_id: str, seq: int):
    path = request.POST.get("path", "")
    try:
        value = services.sensitive_reveal(user=request.user, run_id=run_id, seq=seq, path=path, reason=request.POST.get("reason", ""), fields=masking.sensitive_fields())
    except services.RevealRefused as exc:
        return _bad(request, exc)
    ctx = {"run_id": run_id, "seq": seq, "path": path, "value": value}
    return _render(request, "console/reveal.html", ctx, partial="value" if request.htmx else None)


@requires("view_console")
@require_POST
def call_reveal(request, pk: int):
    """One side (intended or observed) of one sensitive field of a call, for whoever may decide it
    or holds view_sensitive (access.masking.may_reveal_on_call); recorded before it is shown."""
    try:
        ev = uncertain_call_evidence(pk=pk)
    except CallNotFound as exc:
        raise Http404(str(exc))
    call = ev["call"]
    if not may_reveal_on_call(request.user, call):
        raise PermissionDenied("your role may not reveal this call's sensitive fields" + (" now: " + call.decidable() if call.decidable() else ""))
    conflict_seq = next((a["seq"] for a in reversed(ev["attempts"]) if a["outcome"] == "conflict"), None)
    try:
        seq, path = services.call_reveal_where(call=call, side=request.POST.get("side", ""), field=request.POST.get("field", ""), conflict_seq=conflict_seq)
        value = services.sensitive_reveal(user=request.user, run_id=call.run_id, seq=seq, path=path, reason=request.POST.get("reason", ""), fields=masking.sensitive_fields())
    except services.RevealRefused as exc:
        return _bad(request, exc)
    ctx = {"run_id": call.run_id, "seq": seq, "path": path, "value": value, "call": call}
    return _render(request, "console/reveal.html", ctx, partial="value" if request.htmx else None)


# --- overview --------------------------------------------------------------------------------


# The overview names this many of the most overdue irreversible calls and links to the queue for the rest.
OVERVIEW_OVERDUE_SHOWN = 8


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
        "overdue_irreversible": selectors.overdue_keys_shown(irreversible.get("overdue", []), masking.sensitive_fields()),
        "overdue_irreversible_count": irreversible.get("overdue_count", 0),
        "overdue_other_count": sum(f["overdue_count"] for c, f in figures.items() if c != "irreversible"),
        "totals": {
            "open": sum(f["still_open"] for f in figures.values()),
            "overdue": sum(f["overdue_count"] for f in figures.values()),
            "escalated": sum(t["escalated"] for t in tally),  # unresolved calls ever escalated
            "oldest_s": max((f["oldest_age_s"] for f in figures.values() if f["oldest_age_s"] is not None), default=None),
        },
        "chart_time": svg.line_chart(labels=labels, series=series, title="Open uncertain calls by risk class, last 24 hours (UTC)"),
        "chart_rows": [(labels[i], [series[c][i] for c in series]) for i in range(len(labels))],
        "chart_classes": list(series),
        "chart_age": svg.bar_chart(bars=hist, title="Age of open uncertain calls"),
        "hist": hist,
        "now": now,
    }
    return _render(request, "console/overview.html", ctx, nav="overview", partial="figures" if request.htmx else None)


# --- queue -----------------------------------------------------------------------------------


def _filter_error_words(form) -> str:
    """A filter form's errors as the screen names its fields: ``Older than (minutes): Ensure ...``.
    Django's messages end with a full stop, so the sentences follow one another."""
    parts = []
    for name, errs in form.errors.items():
        label = form[name].label if name in form.fields else ""
        parts.append((f"{label}: " if label else "") + " ".join(errs))
    return " ".join(parts)


def _queue_page(request, *, can_hold: bool):
    form = forms.QueueFilterForm(request.GET, can_hold=can_hold)
    if not form.is_valid():
        return form, None, _filter_error_words(form)
    try:
        trail = paging.trail_parse(request.GET.get("trail", ""), after=request.GET.get("after") or None)
        kwargs = form.selector_kwargs(request.user)
        page = uncertain_calls_filter(**kwargs, after=request.GET.get("after") or None, limit=form.cleaned_data["limit"])
        page.count, page.count_exact = uncertain_calls_count(**kwargs)
    except (QueryError, ValueError) as exc:
        return form, None, str(exc)
    paging.pages_link(page, request, trail=trail, size=form.cleaned_data["limit"], cursor_name="after")
    return form, page, None


def _filter_query(request, *, drop=("after",)) -> str:
    q = request.GET.copy()
    for k in drop:
        q.pop(k, None)
    return q.urlencode()


@requires("view_console")
@require_GET
def queue(request):
    can_hold = assignment.may_hold_calls(request.user)
    form, page, error = _queue_page(request, can_hold=can_hold)
    if page is not None:
        selectors.queue_shown(page, masking.sensitive_fields())
    bulk_actions = _bulk_actions_for(request.user)
    ctx = {
        "form": form,
        "page": page,
        "error": error,
        # "selected": the calls to show ticked, when a bulk action's "Back" returns here. Neither the
        # next bulk action's filters nor the refresh carry them: they are for this visit only.
        "selected": {int(v) for v in request.GET.getlist("selected") if v.isdigit()},
        "filters": _filter_query(request, drop=("after", "selected")),
        "full_query": _filter_query(request, drop=("selected",)),
        "can_claim": request.user.has_perm(perm("claim_call")),
        "can_hold": can_hold,
        "can_bulk": bool(bulk_actions),
        "bulk_actions": bulk_actions,
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


def _queue_back(filters: str, *, ids: list[str]) -> str:
    """The queue with the bulk form's filters and ``ids`` ticked again: where "Back" and "Cancel"
    lead from a bulk action, so the person finds the calls they chose still chosen."""
    q = QueryDict(filters, mutable=True)
    q.setlist("selected", [i for i in ids if i.isdigit()][: services.BULK_LIMIT])
    return f"{reverse('console:queue')}?{q.urlencode()}"


@requires("view_console")
@require_POST
def queue_bulk(request):
    form = forms.BulkForm(request.POST)
    allowed = _bulk_actions_for(request.user)
    back = _queue_back(request.POST.get("filters", ""), ids=request.POST.getlist("ids") if request.POST.get("scope") != "all" else [])
    if not form.is_valid():
        return _render(request, "console/bulk.html", {"form": form, "errors": form.errors, "filters": request.POST.get("filters", ""), "back": back}, nav="queue", status=400)
    action = form.cleaned_data["action"]
    if action not in allowed:
        raise PermissionDenied(f"your role may not {forms.BULK_ACTIONS[action].lower()}")
    filters = request.POST.get("filters", "")
    if form.cleaned_data["scope"] == "all":
        matching = forms.QueueFilterForm(QueryDict(filters))
        if not matching.is_valid():
            return _bad(request, BadParam("the filter is not valid: " + "; ".join(f"{k}: {' '.join(v)}" for k, v in matching.errors.items())))
        rows = selectors.calls_matching(matching.selector_kwargs(request.user), limit=services.BULK_LIMIT)
    else:
        rows = selectors.calls_by_ids(form.cleaned_data["ids"][: services.BULK_LIMIT])
    ctx = {"form": form, "action": action, "action_label": forms.BULK_ACTIONS[action], "filters": filters, "assignee": form.cleaned_data.get("assignee", ""), "reason": form.cleaned_data.get("reason", "")}
    ctx["back"] = back
    if form.cleaned_data["step"] == "preview":
        ctx["preview"] = services.bulk_preview(rows=rows, action=action, user=request.user, assignee=form.cleaned_data.get("assignee", ""))
        ctx["will_apply"] = sum(1 for p in ctx["preview"] if p["ok"])
        return _render(request, "console/bulk.html", ctx, nav="queue")
    seen = forms.seen_versions(request.POST)
    ctx["results"] = services.bulk_apply(rows=rows, seen=seen, action=action, user=request.user, assignee=form.cleaned_data.get("assignee", ""), reason=form.cleaned_data.get("reason", ""))
    ctx["applied"] = sum(1 for r in ctx["results"] if r["ok"])
    return _render(request, "console/bulk.html", ctx, nav="queue")


# --- the person's own preferences ------------------------------------------------------------


@requires()
def preferences(request):
    """The signed-in person's time zone for hovered times (all times are written in UTC)."""
    pref = UserPreference.objects.filter(user_id=request.user.pk).first()
    if request.method == "POST":
        form = forms.PreferenceForm(request.POST)
        if not form.is_valid():
            return _render(request, "console/preferences.html", {"form": form, "sample": timezone.now()}, nav="preferences", status=400)
        zone = form.cleaned_data["time_zone"]
        UserPreference.objects.update_or_create(user_id=request.user.pk, defaults={"time_zone": zone})
        request.session[ZONE_KEY] = zone
        where = zone or "your browser's time zone"
        messages.success(request, f"Times now show {where} on hover.")
        return redirect("console:preferences")
    form = forms.PreferenceForm(initial={"time_zone": pref.time_zone if pref else ""})
    return _render(request, "console/preferences.html", {"form": form, "sample": timezone.now()}, nav="preferences")


# --- decision log ----------------------------------------------------------------------------


@requires("view_console")
@require_GET
def decisions(request):
    before = request.GET.get("before") or None
    form = forms.DecisionLogForm(request.GET)
    ctx = {"q": {k: request.GET.get(k, "") for k in form.TEXT}, "since": request.GET.get("since", ""), "until": request.GET.get("until", ""), "filters": _filter_query(request, drop=("before", "trail"))}
    error = None
    try:
        if before is not None:
            decision_log.decision_cursor_parse(before)
        trail = paging.trail_parse(request.GET.get("trail", ""), after=before)
    except ValueError as exc:
        error = str(exc)
    if error is None and not form.is_valid():
        error = "; ".join(" ".join(v) for v in form.errors.values())
    if error is not None:
        # The screen with its filters and the message, so the value can be corrected in place.
        return _render(request, "console/decisions.html", {**ctx, "page": None, "error": error}, nav="decisions", status=400)
    page = decision_log.decisions_shown(fields=masking.sensitive_fields(), **form.search_kwargs(), before=before)
    page.count, page.count_exact = decision_log.decisions_count(**form.search_kwargs(), shown=page, before=before)
    paging.pages_link(page, request, trail=trail, size=decision_log.DECISION_LOG_PAGE, cursor_name="before")
    ctx.update({"page": page, "q": {k: form.cleaned_data.get(k) or "" for k in form.TEXT}})
    return _render(request, "console/decisions.html", ctx, nav="decisions", partial="rows" if request.htmx and before else None)


# --- access record (compliance) ---------------------------------------------------------------


@requires("view_console", "view_sensitive")
@require_GET
def access_log(request):
    """Who was shown sensitive values unmasked, newest first: console reveals, unmasked exports and
    API reads (access.selectors). For holders of view_sensitive, as the reveals themselves are."""
    before = request.GET.get("before") or None
    form = forms.AccessLogForm(request.GET)
    ctx = {
        "form": form,
        "q": {k: request.GET.get(k, "") for k in ("who", "run", "front_end", "since", "until")},
        "front_ends": AccessRecord.FrontEnd.choices,
        "filters": _filter_query(request, drop=("before",)),
    }
    error = None if form.is_valid() else "; ".join(" ".join(v) for v in form.errors.values())
    if error is None:
        try:
            ctx["page"] = access_selectors.access_records_search(**form.search_kwargs(), before=before)
        except ValueError as exc:
            error = str(exc)
    if error is not None:
        # The screen with its filters and the message, as the decision log answers, so the value
        # can be corrected in place.
        return _render(request, "console/access.html", {**ctx, "page": None, "error": error}, nav="access", status=400)
    return _render(request, "console/access.html", ctx, nav="access", partial="rows" if request.htmx and before else None)


# --- policies (administrators) -----------------------------------------------------------------


@requires("manage_policies")
@require_GET
def notifications(request):
    """Administrators: every notification and its delivery attempts, dead letters included."""
    state = request.GET.get("state") or None
    if state is not None and state not in notify_selectors.STATES:
        return _bad(request, BadParam(f"state must be one of {', '.join(notify_selectors.STATES)}"))
    ctx = {"rows": notify_selectors.deliveries_list(state=state), "counts": notify_selectors.deliveries_counts(), "states": notify_selectors.STATES, "state": state or ""}
    return _render(request, "console/notifications.html", ctx, nav="notifications")


@requires("manage_policies")
def policies(request):
    if request.method == "POST":
        form = forms.PolicyEditForm(request.POST)
        if not form.is_valid():
            messages.error(request, "Policy not changed: " + "; ".join(f"{k}: {' '.join(v)}" for k, v in form.errors.items()))
            return redirect("console:policies")
        tool = form.cleaned_data["tool"].strip()
        try:
            policy_update(tool=tool, fields=form.changes(), by=request.user)
        except PolicyError as exc:
            messages.error(request, f"Policy not changed: {exc}")
            return redirect("console:policies")
        messages.success(request, f"Policy for {tool} saved.")
        return redirect("console:policies")
    return _render(request, "console/policies.html", selectors.policies_screen(), nav="policies")
