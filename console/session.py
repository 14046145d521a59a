"""A console request that arrives after the session ended, or with a form whose security token no
longer matches, gets an answer that says what happened (docs/console.md, "When the session ends"):

- an htmx request (a poll, the open-count badge, a button that posts in place) is answered with
  nothing to swap and an ``HX-Trigger`` that makes console.js show "You were signed out" above the
  page; polling stops (htmx's 286). A sign-in page is never swapped into a table or the header.
- a form posted without a session (a decision, a claim, a note) is answered with a page that says
  plainly that nothing was recorded, with the sign-in form on it whose ``next`` is the screen the
  form was on, never the POST-only address it was sent to. What was typed into a decision form is
  kept by the browser (console.js, sessionStorage) and put back on that screen after signing in.
- a CSRF failure (settings CSRF_FAILURE_VIEW) says the same.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from django.conf import settings
from django.http import HttpResponse
from django.shortcuts import render
from django.urls import Resolver404, resolve, reverse
from django.utils.http import url_has_allowed_host_and_scheme

SIGNED_OUT_EVENT = "reckon:signed-out"
HTMX_STOP_POLLING = 286


def resume_path(request) -> str:
    """The screen to return to after signing in: the screen a posted form belongs to (a call's for
    anything about that call, a run's, the queue with its filters for a bulk action, the notification
    configuration), else the same-site page the request came from, else the console's home. Never
    a POST-only address: the page a form came from may itself have been the answer to a POST (a
    bulk preview, an evidence form answered with an error), which a browser cannot open again."""
    try:
        match = resolve(request.path_info)
    except Resolver404:
        match = None
    if match is not None and match.namespace == "console":
        if match.url_name.startswith("call_") and "pk" in match.kwargs:
            return reverse("console:call", args=[match.kwargs["pk"]])
        if request.method == "GET" and not request.htmx:
            return request.get_full_path()
        if match.url_name == "queue_bulk":
            filters = request.POST.get("filters", "")
            return reverse("console:queue") + (f"?{filters}" if filters else "")
        if "run_id" in match.kwargs:
            return reverse("console:run", args=[match.kwargs["run_id"]])
        if match.url_name.startswith("notification_"):
            return reverse("console:notification_config")
    here = request.headers.get("HX-Current-URL") or request.headers.get("Referer") or ""
    if here and url_has_allowed_host_and_scheme(here, allowed_hosts={request.get_host()}, require_https=request.is_secure()):
        parts = urlsplit(here)
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        if not path.startswith(settings.LOGIN_URL):
            return path
    return reverse("console:home")


def signed_out_htmx() -> HttpResponse:
    """Nothing to swap; console.js shows the signed-out banner on the page as it is."""
    response = HttpResponse(status=HTMX_STOP_POLLING)
    response["HX-Reswap"] = "none"
    response["HX-Trigger"] = SIGNED_OUT_EVENT
    return response


def nothing_recorded(request, *, why: str, status: int = 403) -> HttpResponse:
    """The page for a form posted without a session, or with a token that no longer matches."""
    ctx = {"next": resume_path(request), "why": why, "is_decision": _posted_to(request) == "call_decide"}
    return render(request, "console/session_ended.html", ctx, status=status)


def _posted_to(request) -> str:
    try:
        return resolve(request.path_info).url_name or ""
    except Resolver404:
        return ""


def csrf_failure(request, reason: str = ""):
    """settings.CSRF_FAILURE_VIEW: the form's token was missing or did not match. Signed out (every
    cookie gone): the same page as an expired session; signed in: the same words, naming the token."""
    if request.htmx:
        return signed_out_htmx()
    if not request.user.is_authenticated:
        return nothing_recorded(request, why="session")
    return nothing_recorded(request, why="token")


class SignedOutMiddleware:
    """Turns the sign-in redirect that ``access.roles.requires`` answers a signed-out console
    request with into the answers above (an htmx request; a form posted). A plain page opened
    signed out keeps the redirect: the sign-in page then says why and returns to it."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if response.status_code != 302 or getattr(request, "user", None) is None or request.user.is_authenticated:
            return response
        if not urlsplit(response.get("Location", "")).path == settings.LOGIN_URL:
            return response
        if request.htmx:
            return signed_out_htmx()
        if request.method == "POST":
            return nothing_recorded(request, why="session")
        return response
