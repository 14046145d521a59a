"""The permission matrix: every console URL, walked by every named actor, with the status each must get."""

import pytest
from django.urls import get_resolver, reverse

from tests.console.helpers import client_for
from tests.console.matrix import CALL, MATRIX, PUBLIC


def test_every_console_route_is_in_the_matrix():
    names = {f"console:{n}" for n in get_resolver().namespace_dict["console"][1].reverse_dict if isinstance(n, str)}
    covered = {name for _, name, *_ in MATRIX} | PUBLIC
    assert names - covered == set(), "add these routes to the permission matrix"


@pytest.mark.parametrize("method,name,args,data,expected", MATRIX, ids=[f"{m} {n} {a}" for m, n, a, *_ in MATRIX])
def test_each_actor_gets_the_status_the_matrix_names(actors, v1_runs, conflict_call, method, name, args, data, expected):
    url = reverse(name, args=[conflict_call.pk if a == CALL else a for a in args])
    for role, user in actors.items():
        resp = getattr(client_for(user), method)(url, data or {})
        # A form posted signed out is answered in place: nothing was recorded, sign in (console/session.py).
        want = 403 if role == "anonymous" and method == "post" else expected[role]
        assert resp.status_code == want, f"{role} {method.upper()} {url}: {resp.status_code}, expected {want}"
        if role == "anonymous" and method == "post":
            assert "Nothing was recorded — your session ended; sign in again." in resp.content.decode()
        elif role == "anonymous":
            assert resp["Location"].startswith("/login/?next="), resp["Location"]


@pytest.mark.parametrize("method,name,args,data,expected", MATRIX, ids=[f"{m} {n} {a}" for m, n, a, *_ in MATRIX])
def test_no_page_leaks_data_without_sign_in(v1_runs, conflict_call, method, name, args, data, expected):
    resp = getattr(client_for(None), method)(reverse(name, args=[conflict_call.pk if a == CALL else a for a in args]), data or {}, follow=True)
    if method == "post":  # answered in place, the sign-in form on the page (console/session.py)
        assert resp.status_code == 403 and not resp.redirect_chain
    else:
        assert resp.redirect_chain and resp.redirect_chain[-1][0].startswith("/login/")
    body = resp.content.decode()
    assert "Sign in to Reckon" in body
    # The only trace of the page asked for is the address to return to after signing in.
    body = body.replace(resp.context["next"], "")
    for run_id in [*v1_runs, "run-conflict"]:
        assert run_id not in body


def test_every_post_is_refused_without_a_csrf_token(actors, v1_runs, conflict_call):
    posts = [(name, args, data) for method, name, args, data, _ in MATRIX if method == "post"] + [("console:logout", (), {})]
    for name, args, data in posts:
        url = reverse(name, args=[conflict_call.pk if a == CALL else a for a in args])
        resp = client_for(actors["admin"], csrf=True).post(url, data)
        assert resp.status_code == 403, f"POST {name} without a CSRF token: {resp.status_code}"
    login = client_for(None, csrf=True).post(reverse("console:login"), {"username": "ada.admin", "password": "x"})
    assert login.status_code == 403


def test_signing_in_with_the_form_reaches_the_queue(oncall):
    c = client_for(None)
    page = c.get("/login/")
    assert page.status_code == 200
    resp = c.post("/login/", {"username": "olivia.oncall", "password": "correct horse battery staple"}, follow=True)
    assert resp.redirect_chain[-1][0] == "/queue/"
