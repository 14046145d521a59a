"""Finding things and moving around in a real browser (Debian's Chromium via Playwright): the
navigation's search, the keyboard shortcuts, and every screen at 390 px wide without sideways
scrolling."""

from __future__ import annotations

import os

import pytest

from tests.console.helpers import CONFLICT_ARGS
from tests.console.browser import CHROMIUM, shot, signed_in

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is absent (apt-get install chromium)"),
]


def _search(page, text: str):
    page.keyboard.press("Escape")
    page.locator("body").click(position={"x": 5, "y": 300})
    page.keyboard.press("/")  # the shortcut puts the cursor in the navigation's search box
    assert page.evaluate("document.activeElement.id") == "site-q"
    page.keyboard.type(text)
    # The results page is already open after the first search, so its summary is no sign that this
    # search has answered: wait for the navigation itself.
    with page.expect_navigation():
        page.keyboard.press("Enter")
    page.wait_for_selector("#search-summary")
    assert page.input_value("#site-q") == text


def test_the_navigation_search_finds_by_key_prefix_call_id_reference_and_argument(live_server, page, oncall, decided, flying):
    call = decided
    page.set_viewport_size({"width": 1280, "height": 800})
    signed_in(page, live_server, oncall)
    _search(page, call.idempotency_key[:8])
    assert page.locator(f"#found-calls a[href='/calls/{call.pk}/']").count() == 1
    shot(page, "search-key-prefix")
    _search(page, "call_1")  # the call id (the demo agent's)
    assert page.locator(f"#found-calls a[href='/calls/{call.pk}/']").count() == 1
    _search(page, "ledger-tkt-9001")  # an evidence reference, any case
    assert "LEDGER-TKT-9001" in page.inner_text("#found-decisions")
    _search(page, CONFLICT_ARGS["reference"])  # an argument's value
    assert "argument reference" in page.inner_text("#found-calls")
    _search(page, CONFLICT_ARGS["account"])  # sensitive: on-call may not see it, so it finds nothing
    assert page.locator(f"#found-calls a[href='/calls/{call.pk}/']").count() == 0
    assert "No call matches" in page.inner_text("#found-calls")
    _search(page, "fly0key")  # a call still in flight
    assert "in flight" in page.inner_text("#found-calls")


def test_keyboard_moves_opens_and_claims_but_never_decides(live_server, page, oncall, conflict_call):
    from recovery.models import UncertainCall

    page.set_viewport_size({"width": 1280, "height": 800})
    signed_in(page, live_server, oncall)
    page.keyboard.press("?")
    assert page.locator("#keys-help").is_visible()
    page.keyboard.press("Escape")
    assert not page.locator("#keys-help").is_visible()
    page.keyboard.press("j")
    assert page.locator("tr.kbd-current").count() == 1
    assert page.evaluate("document.activeElement.getAttribute('href')") == f"/calls/{conflict_call.pk}/"
    page.keyboard.press("k")  # already at the top: stays
    assert page.locator("tr.kbd-current").count() == 1
    page.keyboard.press("c")
    page.wait_for_selector(".messages .success")
    assert "claimed" in page.inner_text(".messages")
    assert UncertainCall.objects.get(pk=conflict_call.pk).claimed_by_name == "olivia.oncall"
    page.keyboard.press("j")
    page.keyboard.press("o")
    page.wait_for_url(f"{live_server.url}/calls/{conflict_call.pk}/")
    for key in "jkoc":  # on the decision screen no key does anything to the call
        page.keyboard.press(key)
    page.keyboard.press("Enter")
    row = UncertainCall.objects.get(pk=conflict_call.pk)
    assert row.state == "escalated" and row.disposition == "", (row.state, row.disposition)
    assert page.url == f"{live_server.url}/calls/{conflict_call.pk}/"


def test_every_screen_fits_390_px_without_sideways_scrolling(live_server, page, admin_user, decided, flying, v1_runs):
    call = decided
    screens = {
        "overview": "/overview/",
        "queue": "/queue/?state=all",
        "runs": "/runs/",
        "run": "/runs/run-conflict/?expand=all",
        "call": f"/calls/{call.pk}/",
        "decisions": "/decisions/",
        "search": f"/search/?q={call.idempotency_key[:6]}",
        "access": "/access/",
        "policies": "/policies/",
        "notifications": "/notifications/",
        "notification_config": "/notifications/config/",
        "preferences": "/preferences/",
        "reports": "/reports/",
    }
    overflowing = {}
    for width in (1280, 390):  # the sign-in page, signed out
        page.set_viewport_size({"width": width, "height": 800})
        page.goto(f"{live_server.url}/login/")
        if page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth") > 0:
            overflowing[f"login at {width}"] = True
    page.set_viewport_size({"width": 1280, "height": 800})
    signed_in(page, live_server, admin_user, screens["overview"])  # the first screen, at the first width
    for width in (1280, 390):
        page.set_viewport_size({"width": width, "height": 800})
        for name, url in screens.items():
            if page.url != live_server.url + url:  # each screen loaded at this width (the queue folds its filters on a phone as it loads)
                page.goto(live_server.url + url)
            # One round trip to the page's own script for both, not a locator's (which sets up its own world in each new page).
            headings, extra = page.evaluate("[document.querySelectorAll('h1').length, document.documentElement.scrollWidth - document.documentElement.clientWidth]")
            assert headings == 1, name
            if extra > 0:
                overflowing[f"{name} at {width}"] = extra
            shot(page, f"{name}-{width}")
    assert not overflowing, f"pages wider than the window (px): {overflowing}"
