"""The permission matrix: every console URL, walked by every named actor, with the status each must get."""

import pytest
from django.urls import get_resolver, reverse

from tests.console.conftest import client_for

R = ("oncall", "compliance", "manager", "outsider", "admin", "anonymous")


def everyone_who_reads(ok=200):
    return {"oncall": ok, "compliance": ok, "manager": ok, "outsider": 403, "admin": ok, "anonymous": 302}


def only(*roles, ok=200):
    return {r: (ok if r in roles else 302 if r == "anonymous" else 403) for r in R}


RUN = "run-q3-recon"
CALL = "<call>"  # replaced by the conflict call's pk at run time

# (method, url name, args, data, expected status per actor)
MATRIX = [
    ("get", "console:home", (), None, {"oncall": 302, "compliance": 302, "manager": 302, "outsider": 403, "admin": 302, "anonymous": 302}),
    ("get", "console:runs", (), None, everyone_who_reads()),
    ("get", "console:run", (RUN,), None, everyone_who_reads()),
    ("get", "console:run_state", (RUN,), {"at": 3}, everyone_who_reads(302)),
    ("get", "console:run_event_json", (RUN, 3), None, everyone_who_reads()),
    ("get", "console:run_state_json", (RUN,), {"at": 3}, everyone_who_reads()),
    ("get", "console:run_export", (RUN, "jsonl"), None, only("compliance", "admin")),
    ("get", "console:run_export", (RUN, "csv"), None, only("compliance", "admin")),
    ("get", "console:run_export_digest", (RUN, "jsonl"), None, only("compliance", "admin")),
    # post_correction's policy marks account sensitive; a reveal is for holders of view_sensitive only.
    ("post", "console:reveal", (RUN, 11), {"path": "arguments.account", "reason": "audit"}, only("compliance", "admin")),
    # The evidence bundle: masked by default, for reviewers who may export (unmasked needs a reason).
    ("post", "console:run_evidence", (RUN,), {}, only("compliance", "admin")),
    ("post", "console:run_evidence", (RUN,), {"unmasked": "1"}, only("compliance", "admin", ok=400)),
    # On a call: holders of view_sensitive, and whoever may decide it while it can be decided.
    ("post", "console:call_reveal", (CALL,), {"side": "observed", "field": "account", "reason": "INC-7"}, only("oncall", "compliance", "admin")),
    # Each signed-in person's own time zone; it shows nothing of anyone else's.
    ("get", "console:preferences", (), None, {**{r: 200 for r in R}, "anonymous": 302}),
    ("get", "console:overview", (), None, everyone_who_reads()),
    ("get", "console:queue", (), None, everyone_who_reads()),
    ("get", "console:decisions", (), None, everyone_who_reads()),
    ("get", "console:search", (), None, everyone_who_reads()),
    ("get", "console:open_badge", (), None, everyone_who_reads()),
    ("get", "console:access", (), None, only("compliance", "admin")),
    ("get", "console:policies", (), None, only("admin")),
    ("post", "console:policies", (), {"tool": "x"}, only("admin", ok=302)),
    ("get", "console:notifications", (), None, only("admin")),
    ("get", "console:notification_config", (), None, only("admin")),
    ("post", "console:notification_channel", (), {"name": "x"}, only("admin", ok=302)),
    ("post", "console:notification_route", (), {}, only("admin", ok=302)),
    ("post", "console:notification_config_preview", (), {"text": ""}, only("admin", ok=302)),
    ("post", "console:notification_config_apply", (), {}, only("admin", ok=302)),
    ("get", "console:call", (CALL,), None, everyone_who_reads()),
    # Writes sent without their required fields: a permitted actor gets 400, and nothing is written.
    ("post", "console:call_decide", (CALL,), {}, only("oncall", "admin", ok=400)),
    ("post", "console:call_claim", (CALL,), {"seen_version": "x"}, only("oncall", "admin", ok=400)),
    ("post", "console:call_release", (CALL,), {"seen_version": "x"}, only("oncall", "admin", ok=400)),
    ("post", "console:call_assign", (CALL,), {}, only("oncall", "admin", ok=400)),
    ("post", "console:call_note", (CALL,), {"text": ""}, only("oncall", "compliance", "admin", ok=400)),
    ("post", "console:queue_bulk", (), {}, everyone_who_reads(400)),
    # The reports: managers and administrators (view_reports); every call's CSV is masked per reader.
    ("get", "console:reports", (), None, only("manager", "admin")),
    ("get", "console:report_csv", ("volume",), None, only("manager", "admin")),
    ("get", "console:report_csv", ("calls",), None, only("manager", "admin")),
]

# Routes that are deliberately open: signing in, and signing out (which only ends a session); the
# single sign-on start and callback (404 while it is not configured: tests/access/test_sign_in_settings.py).
PUBLIC = {"console:login", "console:logout", "console:oidc_start", "console:oidc_callback"}


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
