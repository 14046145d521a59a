"""When the session ends or a form's token is stale: nothing is swapped, nothing is recorded
silently, and the page says so (console/session.py). And a decision form sent twice writes once."""

from django.test import Client

from recovery.models import UncertainCall
from runs.models import Event
from tests.console.helpers import client_for


def _decide(client, call, **data):
    return client.post(f"/calls/{call.pk}/decide/", {"seen_version": call.version, "decision": "escalate", "reason": "ledger team to check C-801", **data})


def test_a_decision_posted_after_the_session_ended_says_nothing_was_recorded_and_returns_to_the_call(oncall, conflict_call):
    before = Event.objects.filter(run_id=conflict_call.run_id).count()
    resp = _decide(Client(), conflict_call)
    assert resp.status_code == 403
    text = resp.content.decode()
    assert "Nothing was recorded — your session ended; sign in again." in text
    assert f'name="next" value="/calls/{conflict_call.pk}/"' in text and "/decide/" not in text.split('name="next"')[1][:40]
    assert Event.objects.filter(run_id=conflict_call.run_id).count() == before
    # Signing in from that page goes to the call's screen (a GET that answers 200), never to the POST-only address.
    signed = Client().post("/login/", {"username": "olivia.oncall", "password": "correct horse battery staple", "next": f"/calls/{conflict_call.pk}/"})
    assert signed.status_code == 302 and signed["Location"] == f"/calls/{conflict_call.pk}/"


def test_a_decision_with_every_cookie_gone_fails_its_token_and_says_the_same(oncall, conflict_call):
    resp = _decide(Client(enforce_csrf_checks=True), conflict_call)
    assert resp.status_code == 403
    assert "Nothing was recorded — your session ended; sign in again." in resp.content.decode()
    assert f'value="/calls/{conflict_call.pk}/"' in resp.content.decode()


def test_a_signed_in_decision_with_a_stale_token_says_nothing_was_recorded(oncall, conflict_call):
    resp = _decide(client_for(oncall, csrf=True), conflict_call)
    assert resp.status_code == 403
    text = resp.content.decode()
    assert "Nothing was recorded — the form's security token had expired" in text and f'href="/calls/{conflict_call.pk}/"' in text


def test_an_htmx_poll_after_the_session_ended_swaps_nothing_and_stops(oncall, conflict_call):
    for url in ("/queue/?tenant=acme", "/nav/open-count/", "/overview/"):
        resp = Client().get(url, headers={"HX-Request": "true", "HX-Current-URL": "http://testserver/queue/"})
        assert resp.status_code == 286 and resp.content == b"", url
        assert resp["HX-Reswap"] == "none" and resp["HX-Trigger"] == "reckon:signed-out"


def test_a_page_opened_signed_out_still_goes_to_sign_in_which_says_why(oncall):
    resp = Client().get("/queue/", follow=True)
    assert resp.redirect_chain[-1][0] == "/login/?next=/queue/"
    assert "You are signed out. Sign in to continue" in resp.content.decode()


def test_the_same_decision_form_sent_twice_writes_one_escalation(oncall, conflict_call):
    client = client_for(oncall)
    page = client.get(f"/calls/{conflict_call.pk}/").content.decode()
    token = page.split('name="form_token" value="')[1].split('"')[0]
    assert _decide(client, conflict_call, form_token=token).status_code == 302
    call = UncertainCall.objects.get(pk=conflict_call.pk)
    before = Event.objects.filter(run_id=call.run_id, type="approval_decided").count()
    # Back restores the page; the browser re-sends it, now against the current version.
    again = client.post(f"/calls/{call.pk}/decide/", {"seen_version": call.version, "decision": "escalate", "reason": "ledger team to check C-801", "form_token": token}, follow=True)
    assert again.status_code == 200
    assert "had already been sent" in again.content.decode()
    assert Event.objects.filter(run_id=call.run_id, type="approval_decided").count() == before
    # A fresh page has a fresh token: a new decision is still possible.
    fresh = client.get(f"/calls/{call.pk}/").content.decode().split('name="form_token" value="')[1].split('"')[0]
    assert fresh != token


def test_a_form_posted_from_a_page_that_answered_a_post_signs_in_back_to_its_screen_not_the_post_address(oncall, conflict_call):
    # The bulk preview and the evidence form's error page are answers to a POST: their address
    # (the Referer of the next send) cannot be opened again, so sign-in returns to the screen.
    cases = [
        ("/queue/bulk/", {"filters": "tenant=acme", "action": "claim", "scope": "selected", "ids": [conflict_call.pk], "step": "apply"}, "/queue/?tenant=acme"),
        (f"/runs/{conflict_call.run_id}/evidence.zip", {"unmasked": "1"}, f"/runs/{conflict_call.run_id}/"),
    ]
    for url, data, screen in cases:
        resp = Client().post(url, data, headers={"Referer": f"http://testserver{url}"})
        assert resp.status_code == 403 and "Nothing was recorded" in resp.content.decode(), url
        assert f'name="next" value="{screen}"' in resp.content.decode(), (url, resp.content.decode().split('name="next"')[1][:60])
        signed = client_for(oncall).get(screen)
        assert signed.status_code == 200, screen
