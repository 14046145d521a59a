"""The approval screen: one call, the decision on it, and claiming, assigning and noting it.
Thin, as console.views: each view checks the role, calls recovery or access, and renders
console/call.html."""

from __future__ import annotations

import secrets

from django.contrib import messages
from django.db import IntegrityError, transaction
from django.http import Http404
from django.shortcuts import redirect
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.views.decorators.http import require_GET, require_POST

from access import assignment
from access.masking import may_reveal_on_call
from access.roles import perm, requires
from console import forms, selectors
from console.models import DecisionFormUse
from console.templatetags.console_tags import utc
from console.views import BadParam, _bad, _render
from notify import selectors as notify_selectors
from recovery import decisions as actions
from recovery import masking
from recovery.errors import CallNotFound, NotDecidable, RecoveryError, RunBusy, StaleDecision
from recovery.models import Decision, UncertainCall
from recovery.selectors import uncertain_calls_filter
from runs.models import Run


# --- one call: the approval screen ------------------------------------------------------------


def _call_context(request, pk: int, *, decision_form=None, note_form=None) -> dict:
    try:
        ctx = selectors.call_screen(pk=pk, fields=masking.sensitive_fields())
    except CallNotFound as exc:
        raise Http404(str(exc))
    call, user = ctx["call"], request.user
    return {
        **ctx,
        "can_decide": user.has_perm(perm("decide_call")) and ctx["not_decidable"] is None,
        "can_claim": user.has_perm(perm("claim_call")) and call.state != "resolved",
        "can_note": user.has_perm(perm("add_note")),
        "can_reveal": may_reveal_on_call(user, call),
        "decision_form": decision_form or forms.DecisionForm(initial={"seen_version": call.version}),
        # A fresh one-time token each time the form is drawn, a re-drawn bound form included.
        "form_token": secrets.token_urlsafe(24),
        "note_form": note_form or forms.NoteForm(),
        "paging": notify_selectors.call_paging_line(call_pk=call.pk),
    }


# What a person or the worker does to a call that makes an open screen of it stale.
_ACTS = ("approval_decided", "tool_call_resolved", "approval_requested", "operator_note", "tool_call_completed", "reconciliation_attempted")


def _stale_words(ctx: dict, user) -> SafeString:
    """What landed between the page being loaded and the decision being sent: who did what, and
    when (the same person in another tab is named as such), and whether anything is left to decide."""
    call = ctx["call"]
    acts = [h for h in ctx["history"] if h["type"] in _ACTS]
    last = acts[-1] if acts else None
    # An escalation is a decision followed by the request it makes: name the decision, what was done.
    if last and last["type"] == "approval_requested" and len(acts) > 1 and acts[-2]["type"] == "approval_decided":
        last = acts[-2]
    who = (last["shown"].get("by") or last["shown"].get("escalated_by") or "the recovery worker") if last else "someone"
    what = (last["shown"].get("decision") or last["shown"].get("disposition") or last["shown"].get("action") or last["type"]).replace("_", " ") if last else "changed it"
    at = format_html(" at {}", utc(last["ts"])) if last else ""
    actor = "You had already acted on this call (in another tab or window)" if who == user.get_username() else f"{who} acted on this call first"
    if call.state == "resolved":
        tail = format_html('{} There is nothing left to decide; <a href="{}">see the resolved call</a>.', ctx["status_words"], reverse("console:call", args=[call.pk]))
    else:
        tail = format_html('It is still open: <a href="{}">read it as it is now</a> and decide again only if it is still needed.', reverse("console:call", args=[call.pk]))
    return format_html("<strong>Your decision was not recorded.</strong> {}{}: {}. {}", actor, at, what, tail)


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
    if d.get("form_token") and not _form_token_spend(d["form_token"], pk=pk, user=request.user):
        messages.info(request, "This decision form had already been sent (the same page sent again, after Back or a second click): nothing new was recorded. Here is the call as it is now.")
        return redirect("console:call", pk=pk)
    try:
        if d["decision"] == Decision.ESCALATE:
            row = assignment.call_escalate(pk=pk, by=request.user, reason=d["reason"], seen_version=d["seen_version"], assignee=(d.get("assignee") or "").strip() or None)
        else:
            row = actions.decision_record(pk=pk, decision=d["decision"], by=request.user, reason=d["reason"], seen_version=d["seen_version"], evidence_ref=(d.get("evidence_ref") or None))
    except CallNotFound as exc:
        raise Http404(str(exc))
    except StaleDecision:
        ctx = _call_context(request, pk)
        return _render(request, "console/call.html", {**ctx, "stale": _stale_words(ctx, request.user)}, nav="queue", status=409)
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
    messages.success(request, _recorded_words(d, row))
    return redirect("console:call", pk=pk)


def _recorded_words(d: dict, row) -> SafeString:
    """What was just recorded, as the person wrote it, the call's state now, and the next call of
    the queue (most dangerous first) to go to."""
    evidence = format_html(" Evidence: {}.", d["evidence_ref"]) if d.get("evidence_ref") else ""
    nxt = next((c for c in uncertain_calls_filter(limit=2).items if c.pk != row.pk), None)
    go = format_html(' <a href="{}" id="next-call">Next call in the queue: {} {}</a>.', reverse("console:call", args=[nxt.pk]), nxt.tool, nxt.call_id) if nxt else format_html(' <a href="{}">The queue</a> has no other call in doubt.', reverse("console:queue"))
    state = f"{row.state}{' (' + row.disposition + ')' if row.disposition else ''}"
    return format_html("Recorded: {}, with your reason “{}”.{} The call is now {}. {}{}", Decision(d["decision"]).label, d["reason"], evidence, state, _run_words(row), go)


def _run_words(row) -> str:
    """Whether the call's run goes on after this decision: finished, still waiting on this call or
    on others, or free of doubt (running on, or resuming when its agent opens it again)."""
    run = Run.objects.get(run_id=row.run_id)
    status = selectors.run_status(run, now=timezone.now())
    if status == "finished":
        return f"Run {run.run_id} had already finished: nothing resumes."
    if row.state != UncertainCall.State.RESOLVED:
        return f"Run {run.run_id} still waits on this call."
    others = selectors.runs_open_calls([run.run_id])[run.run_id]["open"]
    if others:
        return f"Run {run.run_id} still has {others} other call{'s' if others > 1 else ''} in doubt."
    if status == "running":
        return f"Nothing in run {run.run_id} is in doubt any more: its agent holds the run and goes on."
    return f"Nothing in run {run.run_id} is in doubt any more: the run is stopped and resumes when its agent opens it again, with this decision in its state."


def _form_token_spend(token: str, *, pk: int, user) -> bool:
    """True the first time a decision form's one-time token is sent; False for every later send."""
    try:
        with transaction.atomic():
            DecisionFormUse.objects.create(token=token, call_pk=pk, username=user.get_username())
    except IntegrityError:
        return False
    return True


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
    return _call_write(request, pk, lambda v: assignment.call_assign(pk=pk, user=request.user, assignee=name, seen_version=v), f"Assigned to {name}.")


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
