"""Single sign-on in Chromium against a real OpenID provider on 127.0.0.1 (conftest.py): the sign-in,
roles and tenant limits from groups, the refusals, the session's bound and sign-out."""

from __future__ import annotations

import os

import pytest

from tests.access.oidc.helpers import sso_sign_in
from tests.console.browser import CHROMIUM, shot

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is absent (apt-get install chromium)"),
]


def _people():
    from django.contrib.auth.models import User

    from access.models import PersonIdentity

    return User.objects.count(), PersonIdentity.objects.count()


def _identity(sub: str):
    from access.models import PersonIdentity

    return PersonIdentity.objects.select_related("user").get(subject=sub)


def _settled(page) -> None:
    """The page's own request after it loaded (the header's count of open calls) answered: a test
    that then moves the session's bound or changes the person at the provider changes it for the
    next request only, not for that one."""
    page.wait_for_selector("#open-badge .count")


def _vouched_at(page) -> float:
    """When the provider last vouched for the browser's session, as the session store holds it."""
    from importlib import import_module

    from django.conf import settings

    from access.oidc import SESSION_AT

    key = next(c["value"] for c in page.context.cookies() if c["name"] == settings.SESSION_COOKIE_NAME)
    return import_module(settings.SESSION_ENGINE).SessionStore(key)[SESSION_AT]


def test_a_person_signs_in_through_the_provider_with_the_role_of_their_group(sso, live_server, page):
    page.set_viewport_size({"width": 1280, "height": 800})
    page.goto(f"{live_server.url}/login/")
    shot(page, "sso-sign-in-page")
    sso_sign_in(page, live_server, "sub-olivia")
    assert "olivia (oncall)" in page.inner_text("header")
    identity = _identity("sub-olivia")
    user = identity.user
    assert (identity.issuer, user.username, user.email, user.first_name, user.last_name) == (sso.issuer, "olivia", "olivia@example.com", "Olivia", "Oncall")
    assert not user.has_usable_password() and not user.is_staff
    assert sorted(g.name for g in user.groups.all()) == ["oncall"]
    assert identity.tenants is None
    page.set_viewport_size({"width": 390, "height": 800})
    page.context.clear_cookies()
    page.goto(f"{live_server.url}/login/?signed_out=1")
    assert page.is_visible("#signed-out-done")
    shot(page, "sso-sign-in-page-narrow")


def test_an_administrator_group_makes_a_staff_superuser(sso, live_server, page):
    sso_sign_in(page, live_server, "sub-adam", expect=None)
    page.wait_for_selector("header")
    user = _identity("sub-adam").user
    assert user.is_staff and user.is_superuser and not user.groups.exists()


def test_a_tenant_limit_comes_from_a_group_claim(sso, live_server, page):
    from access.tokens import principal_for_user
    from demo.management.commands.demo import scenario_run_create

    for run_id, tenant in (("run-acme", "acme"), ("run-globex", "globex")):
        scenario_run_create(run_id=run_id, tool="post_correction", arguments={"tenant": tenant, "amount": "1.00"}, started_minutes_ago=5)
    sso_sign_in(page, live_server, "sub-colin", expect=None)
    page.wait_for_selector("header")
    identity = _identity("sub-colin")
    assert identity.tenants == ["acme"]
    assert principal_for_user(identity.user).tenants == frozenset({"acme"})
    answer = page.request.get(f"{live_server.url}/api/runs")
    assert answer.status == 200, answer.text()
    assert [r["run_id"] for r in answer.json()["runs"]] == ["run-acme"]
    assert page.request.get(f"{live_server.url}/api/runs/run-globex").status == 404
    # The console's screens cannot narrow to tenants yet: closed to a limited person, saying why.
    page.goto(f"{live_server.url}/runs/")
    assert "limited to some tenants" in page.inner_text("main")
    assert "run-globex" not in page.content()


def test_a_person_in_no_mapped_group_is_refused_and_nothing_is_created(sso, live_server, page):
    before = _people()
    sso_sign_in(page, live_server, "sub-nemo", expect=None)
    page.wait_for_selector("#sign-in-refused")
    text = page.inner_text("#sign-in-refused")
    assert "no group that Reckon maps to a role" in text and "marketing" in text and "no account was created" in text
    assert _people() == before
    shot(page, "sso-refused-no-group")


def test_a_person_removed_from_a_group_loses_the_role_at_the_next_sign_in(sso, live_server, page):
    sso_sign_in(page, live_server, "sub-olivia")
    first = _identity("sub-olivia").user
    page.click("header button:has-text('Sign out')")
    page.click("button[autofocus], button:has-text('Yes')")  # the provider asks before signing out there too
    page.wait_for_url(f"{live_server.url}/login/?signed_out=1")
    sso.person("sub-olivia", groups=["reckon-managers"])
    sso_sign_in(page, live_server, "sub-olivia", expect="/overview/")
    user = _identity("sub-olivia").user
    assert user.pk == first.pk
    assert sorted(g.name for g in user.groups.all()) == ["manager"]
    assert "olivia (manager)" in page.inner_text("header")


def test_a_role_taken_away_at_the_provider_is_lost_at_the_session_bound(sso, live_server, page, settings):
    sso_sign_in(page, live_server, "sub-olivia")
    _settled(page)
    sso.person("sub-olivia", groups=["staff"])
    settings.RECKON_OIDC_SESSION_S = 0  # the bound set short rather than waited out: the session is past it
    page.goto(f"{live_server.url}/queue/")
    page.wait_for_url(f"{live_server.url}/login/?next=%2Fqueue%2F")
    assert "no group that Reckon maps to a role" in page.inner_text(".messages")
    assert not _identity("sub-olivia").user.groups.exists()


def test_a_person_disabled_at_the_provider_is_locked_out_at_the_session_bound(sso, live_server, page, settings):
    sso_sign_in(page, live_server, "sub-dora")
    _settled(page)
    signed_in_at = _vouched_at(page)
    settings.RECKON_OIDC_SESSION_S = 0  # the bound set short rather than waited out: past it at every request
    page.goto(f"{live_server.url}/queue/")  # past the bound, still enabled: renewed with the refresh token
    _settled(page)
    assert page.url == f"{live_server.url}/queue/"
    assert _vouched_at(page) > signed_in_at  # the renewal starts the bound again
    sso.person("sub-dora", disabled=True)
    settings.RECKON_OIDC_SESSION_S = 3600
    page.goto(f"{live_server.url}/queue/")  # within the new bound: the session goes on
    _settled(page)
    assert page.url == f"{live_server.url}/queue/"
    settings.RECKON_OIDC_SESSION_S = 0
    page.goto(f"{live_server.url}/queue/")
    page.wait_for_url(f"{live_server.url}/login/?next=%2Fqueue%2F")
    assert "You were signed out" in page.inner_text(".messages") and "invalid_grant" in page.inner_text(".messages")
    shot(page, "sso-disabled-locked-out")
    page.goto(f"{live_server.url}/queue/")
    assert page.url.startswith(f"{live_server.url}/login/")


def test_sign_out_ends_the_session_here_and_at_the_provider(sso, live_server, page):
    sso_sign_in(page, live_server, "sub-olivia")
    page.click("header button:has-text('Sign out')")
    page.wait_for_url(f"{sso.issuer}/**")
    page.click("button[autofocus], button:has-text('Yes')")
    page.wait_for_url(f"{live_server.url}/login/?signed_out=1")
    assert "You are signed out of Reckon" in page.inner_text("#signed-out-done")
    page.goto(f"{live_server.url}/queue/")
    assert page.url.startswith(f"{live_server.url}/login/")
    page.click("#sso-sign-in")
    page.wait_for_selector("input[name=login]")  # the provider's session ended too: it asks again


@pytest.mark.parametrize(
    "sub, words",
    [
        ("sub-fiona", "signature does not verify with the identity provider's keys"),
        ("sub-alex", "issued to another application"),
        ("sub-eddie", "the ID token has expired"),
    ],
)
def test_a_bad_id_token_is_refused_and_nothing_is_created(sso, live_server, page, sub, words):
    before = _people()
    sso_sign_in(page, live_server, sub, expect=None)
    page.wait_for_selector("#sign-in-refused")
    assert words in page.inner_text("#sign-in-refused")
    assert _people() == before
    page.goto(f"{live_server.url}/queue/")
    assert page.url.startswith(f"{live_server.url}/login/")


def test_a_replayed_state_is_refused_and_nothing_is_created(sso, live_server, page, browser):
    answers = []
    page.on("request", lambda r: answers.append(r.url) if "/oidc/callback/" in r.url else None)
    sso_sign_in(page, live_server, "sub-olivia")
    assert len(answers) == 1 and "state=" in answers[0]
    before = _people()
    page.goto(answers[0])
    assert "already used" in page.inner_text("#sign-in-refused")
    other = browser.new_context()
    try:
        stranger = other.new_page()
        stranger.goto(answers[0])
        assert "already used" in stranger.inner_text("#sign-in-refused")
        stranger.goto(f"{live_server.url}/queue/")
        assert stranger.url.startswith(f"{live_server.url}/login/")
    finally:
        other.close()
    assert _people() == before


def test_a_key_set_cached_before_a_rotation_is_fetched_again_for_an_unknown_key(sso, live_server, page):
    from django.core.cache import cache

    from access.oidc import _cache_key

    stale = [{"kty": "RSA", "kid": "retired", "use": "sig", "alg": "RS256", "n": "sXch", "e": "AQAB"}]
    cache.set(_cache_key("jwks"), stale, 600)
    sso_sign_in(page, live_server, "sub-olivia")
    assert [k["kid"] for k in cache.get(_cache_key("jwks"))] == ["k1"]


def test_the_sign_in_and_refusal_pages_have_no_serious_axe_violation(sso, live_server, page, settings):
    from axe_playwright_python.sync_playwright import Axe

    from tests.console.browser import _check

    settings.RECKON_PASSWORD_SIGN_IN = False
    settings.RECKON_BREAK_GLASS_USER = "ada.admin"
    axe = Axe()
    page.goto(f"{live_server.url}/login/")
    assert page.is_visible("#sso-sign-in") and not page.is_visible("#id_password")  # folded away
    shot(page, "sso-sign-in-password-off")
    problems = _check(axe, page, "sso-login", "light")
    sso_sign_in(page, live_server, "sub-nemo", expect=None)
    page.wait_for_selector("#sign-in-refused")
    problems += _check(axe, page, "sso-refused", "light")
    assert problems == []
