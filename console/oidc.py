"""The console's side of single sign-on (access/oidc.py has the rules): the start and callback of the
authorization code flow, the page that says why a sign-in was refused, sign-out at the provider,
and the session's bound.

The callback is mozilla-django-oidc's, which takes each ``state`` back from the session once (a
replayed or unknown ``state`` is refused) and hands the nonce and PKCE verifier to the backend.
Whatever it or the backend refuses is shown on one page, with the reason, status 403, nothing
created; never the library's bare redirect or a 400 page without words.
"""

from __future__ import annotations

import time
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import auth, messages
from django.core.exceptions import SuspiciousOperation
from django.http import Http404, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_POST
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from access.oidc import SESSION_AT, SESSION_ID_TOKEN, SignInRefused, oidc_enabled, oidc_setting, provider_get, session_renew
from console.session import signed_out_htmx


def refused(request, reason: str):
    return render(request, "registration/oidc_refused.html", {"reason": reason}, status=403)


class OidcStart(OIDCAuthenticationRequestView):
    """To the provider's sign-in, with state, nonce and a PKCE challenge kept in the session."""

    get_settings = staticmethod(oidc_setting)

    def __init__(self, *args, **kwargs):
        super(OIDCAuthenticationRequestView, self).__init__(*args, **kwargs)

    @property
    def OIDC_OP_AUTH_ENDPOINT(self):
        return provider_get().authorization_endpoint

    @property
    def OIDC_RP_CLIENT_ID(self):
        return settings.RECKON_OIDC_CLIENT_ID

    def get(self, request):
        if not oidc_enabled():
            raise Http404("single sign-on is not configured")
        try:
            return super().get(request)
        except SignInRefused as exc:
            return refused(request, str(exc))


class OidcCallback(OIDCAuthenticationCallbackView):
    get_settings = staticmethod(oidc_setting)

    def get(self, request):
        if not oidc_enabled():
            raise Http404("single sign-on is not configured")
        if request.GET.get("error"):
            super().get(request)  # forgets the state and ends any session, as the library does
            said = request.GET.get("error_description") or request.GET["error"]
            return refused(request, f"the identity provider did not sign you in: {said[:300]}")
        if "oidc_states" not in request.session or request.GET.get("state") not in request.session["oidc_states"]:
            return refused(request, "this sign-in answer was already used, or was not started in this browser (its state is unknown): start again")
        try:
            return super().get(request)
        except SignInRefused as exc:
            return refused(request, str(exc))
        except SuspiciousOperation as exc:
            return refused(request, str(exc))

    def login_failure(self):
        return refused(self.request, "the identity provider's answer did not sign anyone in")


def provider_logout_url(request, id_token: str | None) -> str | None:
    """Where to send the browser to sign out at the provider too (RP-initiated logout), when its
    discovery document offers it; afterwards it returns to the sign-in page."""
    if not oidc_enabled() or not id_token:
        return None
    try:
        end = provider_get().end_session_endpoint
    except SignInRefused:
        return None
    if not end:
        return None
    back = request.build_absolute_uri(reverse("console:login")) + "?signed_out=1"
    return f"{end}?{urlencode({'id_token_hint': id_token, 'post_logout_redirect_uri': back, 'client_id': settings.RECKON_OIDC_CLIENT_ID})}"


@require_POST
def sign_out(request):
    """Ends Reckon's session, then the provider's where it offers RP-initiated logout. The way there
    is a page that moves on by itself (a meta refresh, with a link), not a redirect of the posted
    form: the console's Content-Security-Policy lets forms lead to Reckon only (form-action)."""
    at_provider = provider_logout_url(request, request.session.get(SESSION_ID_TOKEN))
    auth.logout(request)
    if at_provider:
        return render(request, "registration/signed_out_provider.html", {"provider_url": at_provider})
    return HttpResponseRedirect(reverse("console:login") + "?signed_out=1")


class SessionBoundMiddleware:
    """A session signed in through the provider lasts RECKON_OIDC_SESSION_S; then the provider is
    asked again (access.oidc.session_renew) before the request goes on. A person it no longer
    vouches for (disabled, or in no mapped group) is signed out there and then, and told why."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        at = request.session.get(SESSION_AT) if hasattr(request, "session") else None
        if at is not None and request.user.is_authenticated and time.time() - at >= settings.RECKON_OIDC_SESSION_S:
            try:
                request.user = session_renew(session=request.session)
            except SignInRefused as exc:
                auth.logout(request)
                if request.htmx:
                    return signed_out_htmx()
                messages.warning(request, f"You were signed out: {exc}.")
                return HttpResponseRedirect(reverse("console:login") + "?" + urlencode({"next": request.get_full_path()}))
        return self.get_response(request)


def sign_in_options(request) -> dict:
    """Template context (settings TEMPLATES): which ways to sign in the one sign-in form offers."""
    return {"sign_in": {"sso": oidc_enabled(), "sso_button": settings.RECKON_OIDC_BUTTON, "passwords": settings.RECKON_PASSWORD_SIGN_IN}}
