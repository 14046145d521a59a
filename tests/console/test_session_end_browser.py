"""The console when things go wrong, in Chromium: the session ends mid-task, Back after a decision,
a phone, and text that tries to read as something else (docs/console.md, "When the session ends")."""

import os

import pytest

from runs.models import Event
from tests.console import browser
from tests.console.helpers import PASSWORD
from tests.console.browser import CHROMIUM, shot

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is absent (apt-get install chromium)"),
]

REASON = "Ledger team is checking C-801 against the bank statement"


def snap(page, name: str) -> None:
    shot(page, f"when-wrong-{name}")


def sign_in(page, live_server, oncall, next_url: str = "/queue/"):
    """Olivia signed in already: each test here is about what happens after; signing in again
    through the form, which several of them do, is what the form's own part is tested by."""
    browser.signed_in(page, live_server, oncall, next_url)


def _fill_escalation(page):
    page.check("#choice-escalate")
    page.fill("#id_reason", REASON)


def _decisions(call) -> int:
    return Event.objects.filter(run_id=call.run_id, type="approval_decided").count()


@pytest.mark.parametrize("width", [1280, 390])
def test_a_decision_sent_after_the_session_ended_says_nothing_was_recorded_and_comes_back_filled_in(live_server, page, oncall, conflict_call, width):
    page.set_viewport_size({"width": width, "height": 800})
    sign_in(page, live_server, oncall, f"/calls/{conflict_call.pk}/")
    _fill_escalation(page)
    before = _decisions(conflict_call)
    page.context.clear_cookies(name="sessionid")
    page.click("#decide-submit")
    page.wait_for_selector("#nothing-recorded")
    assert "Nothing was recorded — your session ended; sign in again." in page.inner_text("#nothing-recorded")
    assert _decisions(conflict_call) == before
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    snap(page, f"session-ended-{width}")
    page.fill("#id_username", "olivia.oncall")
    page.fill("#id_password", PASSWORD)
    page.click("button:has-text('Sign in')")
    page.wait_for_url(f"{live_server.url}/calls/{conflict_call.pk}/")  # the call's screen, not /decide/ and no 405
    assert page.is_visible("#draft-restored")
    assert page.input_value("#id_reason") == REASON and page.is_checked("#choice-escalate")
    # The reason's counter counts what was put back (the limit the server checks is beside it).
    assert page.inner_text("#reason-count") == f"reason: {len(REASON)} of 2,000 characters"
    snap(page, f"session-ended-restored-{width}")
    page.click("#decide-submit")
    page.wait_for_selector(".messages .success")
    assert _decisions(conflict_call) == before + 1


def test_a_decision_sent_with_every_cookie_gone_says_the_same(live_server, page, oncall, conflict_call):
    page.set_viewport_size({"width": 1280, "height": 800})
    sign_in(page, live_server, oncall, f"/calls/{conflict_call.pk}/")
    _fill_escalation(page)
    page.context.clear_cookies()
    page.click("#decide-submit")
    page.wait_for_selector("#nothing-recorded")
    assert "Nothing was recorded — your session ended; sign in again." in page.inner_text("#nothing-recorded")
    page.fill("#id_username", "olivia.oncall")
    page.fill("#id_password", PASSWORD)
    page.click("button:has-text('Sign in')")
    page.wait_for_url(f"{live_server.url}/calls/{conflict_call.pk}/")
    assert page.input_value("#id_reason") == REASON


@pytest.mark.parametrize("width", [1280, 390])
def test_the_queues_refresh_after_the_session_ended_keeps_the_table_and_says_so(live_server, page, oncall, conflict_call, width):
    page.set_viewport_size({"width": width, "height": 800})
    page.clock.install()  # the page's own timers, moved on below instead of waited for
    sign_in(page, live_server, oncall)
    page.wait_for_selector("#results table")
    rows = page.locator("#results tbody tr").count()
    page.context.clear_cookies(name="sessionid")
    page.clock.fast_forward("00:16")  # past the queue's 15 s refresh
    page.wait_for_selector("#signed-out", state="visible")
    assert "You were signed out" in page.inner_text("#signed-out")
    assert page.locator("#results tbody tr").count() == rows and page.locator("#results #id_username").count() == 0
    assert page.locator("header #id_username, #open-badge form").count() == 0
    assert page.get_attribute("#signed-out-link", "href") == "/login/?next=%2Fqueue%2F"
    snap(page, f"queue-signed-out-{width}")
    page.click("#signed-out-link")
    page.fill("#id_username", "olivia.oncall")
    page.fill("#id_password", PASSWORD)
    page.click("button:has-text('Sign in')")
    page.wait_for_url(f"{live_server.url}/queue/")


def test_on_a_phone_what_differs_comes_before_the_choices_and_the_queue_shows_calls_first(live_server, page, oncall, conflict_call):
    page.set_viewport_size({"width": 390, "height": 844})
    sign_in(page, live_server, oncall)
    assert not page.locator("#queue-filters-d").evaluate("d => d.open")
    assert page.locator("#results tbody tr").first.bounding_box()["y"] < 844
    snap(page, "queue-390")
    page.goto(f"{live_server.url}/calls/{conflict_call.pk}/")
    conflict, choices, button = (page.locator(s).bounding_box() for s in ("#conflict", "#decide fieldset", "#decide-submit"))
    assert conflict["y"] + conflict["height"] <= choices["y"] and "480.00" in page.inner_text("#conflict")
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    snap(page, "call-390")
    page.set_viewport_size({"width": 1280, "height": 800})
    page.goto(f"{live_server.url}/queue/")
    assert page.locator("#queue-filters-d").evaluate("d => d.open")


def test_back_after_an_escalation_and_the_button_again_records_nothing_more(live_server, page, oncall, conflict_call):
    page.set_viewport_size({"width": 1280, "height": 800})
    sign_in(page, live_server, oncall, f"/calls/{conflict_call.pk}/")
    _fill_escalation(page)
    page.click("#decide-submit")
    page.wait_for_selector(".messages .success")
    after = _decisions(conflict_call)
    page.go_back()
    page.wait_for_selector("#decide-form")
    # The browser does not put the decision back ready to send again: the form is empty, and the
    # button only asks for a choice and a reason.
    assert not page.is_checked("#choice-escalate") and page.input_value("#id_reason") == ""
    page.click("#decide-submit")
    page.wait_for_selector("#decide-errors")
    assert _decisions(conflict_call) == after
    snap(page, "back-after-escalation")


def test_an_override_in_a_note_is_shown_as_its_code_point(live_server, page, oncall, conflict_call):
    page.set_viewport_size({"width": 1280, "height": 800})
    sign_in(page, live_server, oncall, f"/calls/{conflict_call.pk}/")
    page.click("#history-d summary")
    page.fill("#id_text", "account \u202e1234\u202c")
    page.click("button:has-text('Add note')")
    page.wait_for_selector(".messages .success")
    page.click("#history-d summary")
    notes = page.inner_text("#history-d")
    assert "account <U+202E>1234<U+202C>" in notes and "\u202e" not in notes
    snap(page, "note-bidi")


def test_a_choice_the_call_does_not_offer_looks_unavailable_in_light_and_dark(live_server, page, oncall, conflict_call):
    page.set_viewport_size({"width": 1280, "height": 800})
    sign_in(page, live_server, oncall, f"/calls/{conflict_call.pk}/")
    assert page.is_disabled("#choice-compensate") and page.is_enabled("#choice-not")
    style = "sel => { const s = getComputedStyle(document.querySelector(sel)); return [s.color, s.textDecorationLine, s.cursor, s.fontWeight]; }"
    for mode in ("light", "dark"):
        page.emulate_media(color_scheme=mode)
        off, on = page.evaluate(style, "label[for=choice-compensate]"), page.evaluate(style, "label[for=choice-not]")
        assert off[0] != on[0] and off[1] == "line-through" and off[2] == "not-allowed" and off[3] != on[3], (mode, off, on)
        snap(page, f"compensate-disabled-{mode}")
