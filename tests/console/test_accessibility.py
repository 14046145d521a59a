"""Every console screen checked by axe-core in Chromium, in light and in dark mode.

The list of screens is checked against console/urls.py, so a new screen cannot be left out: each
route is either visited here (and its page given to axe) or named in NOT_A_PAGE with the reason it
renders no page of its own. A serious or critical violation fails the test with axe's own words.
One browser and one live server serve the whole module; each mode signs in once.
"""

import os

import pytest
from axe_playwright_python.sync_playwright import Axe

from tests.console.helpers import PASSWORD
from tests.console.browser import CHROMIUM
from tests.console.browser import _check

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is absent (apt-get install chromium)"),
]

# Routes that answer with no page of their own: a redirect, a file, or a form's target whose answer
# is one of the pages below (visited through the form that posts to it).
NOT_A_PAGE = {
    "home": "redirects to the overview or the queue",
    "logout": "signs out and redirects to the sign-in page (or the page on to the provider's sign-out)",
    "oidc_start": "redirects to the identity provider (404 while single sign-on is off)",
    "oidc_callback": "the provider's answer: signs in and redirects, or the refusal page (tests/access/oidc)",
    "run_state": "an htmx fragment of the run page (without htmx it redirects there)",
    "run_export": "a JSONL or CSV file",
    "run_export_digest": "a text digest",
    "report_csv": "a CSV file: one table of the reports, or every call of the period",
    "run_event_json": "a JSON file: one event's whole payload, where the run screen cut it",
    "run_state_json": "a JSON file: the whole state document, where the run screen cut it",
    "call_claim": "redirects to the call",
    "call_release": "redirects to the call",
    "call_assign": "redirects to the call",
    "call_note": "redirects to the call",
    "open_badge": "an htmx fragment of the navigation (the open-call count)",
    "notification_channel": "redirects to the channels and routes screen",
    "notification_route": "redirects to the channels and routes screen",
    "notification_config_preview": "redirects to the channels and routes screen, which shows the preview",
    "notification_config_apply": "redirects to the channels and routes screen",
}


@pytest.fixture
def screens(admin_user, conflict_call, v1_runs):
    """A console with something on every screen: the conflict call, the reference runs, a decision,
    a reveal in the access record, a notification and the demo policies."""
    from access.services import access_record_write
    from access.tokens import principal_for_user
    from access.models import AccessRecord

    access_record_write(who=principal_for_user(admin_user), front_end=AccessRecord.FrontEnd.CONSOLE, run_id="run-conflict", seq=conflict_call.start_seq, fields=["arguments.account"], why="INC-7: check the account")
    run = v1_runs[0]
    c = conflict_call
    return [
        ("login", "/login/", None),
        ("overview", "/overview/", None),
        ("queue", "/queue/", None),
        ("runs", "/runs/", None),
        ("run", f"/runs/{run}/", None),
        ("call", f"/calls/{c.pk}/", None),
        ("decisions", "/decisions/", None),
        ("access", "/access/", None),
        ("policies", "/policies/", None),
        ("notifications", "/notifications/", None),
        ("preferences", "/preferences/", None),
        ("notification_config", "/notifications/config/", None),
        ("search", f"/search/?q={c.run_id}", None),
        # The reports with the tables it loads after the page in place; one of them on its own page.
        ("reports", "/reports/", lambda p: p.wait_for_selector(".deferred[aria-busy]", state="detached")),
        ("report_table", "/reports/people/", None),
        # Form targets, reached through their forms.
        ("call_decide", f"/calls/{c.pk}/", lambda p: (p.check("#choice-not"), p.click("#decide-submit"), p.wait_for_selector("#decide-errors"))),
        ("call_reveal", f"/calls/{c.pk}/", lambda p: _submit_reveal(p, "#conflict form.reveal")),
        ("reveal", f"/runs/{c.run_id}/", lambda p: _submit_reveal(p, "form.reveal", htmx=False)),
        ("run_evidence", f"/runs/{run}/", _ask_unmasked_without_a_reason),
        ("queue_bulk", "/queue/", lambda p: (p.check("input[name='ids']"), p.select_option("#bulk-action", "claim"), p.click("button:has-text('Preview')"), p.wait_for_selector("h1:has-text('Preview')"))),
    ]


def _ask_unmasked_without_a_reason(page):
    # The bundle is refused before it is built: the run screen again, with the message at the reason.
    page.check("input[name='unmasked'][value='1']")
    page.click("button:has-text('Download evidence bundle')")
    page.wait_for_selector("#evidence-reason-error")


def _submit_reveal(page, selector: str, *, htmx: bool = True):
    form = page.locator(selector).first
    if not form.is_visible():
        page.locator("details:has(form.reveal) > summary").first.click()
    form.locator("input[name='reason']").fill("INC-7: check the account")
    if not htmx:  # the page of its own that a reveal without JavaScript answers with
        form.evaluate("f => { f.removeAttribute('hx-post'); f.submit(); }")
        page.wait_for_selector("h1:has-text('Revealed value')")
        return
    form.locator("button").click()
    page.wait_for_selector(".revealed")


def _urls_names() -> set[str]:
    from console import urls

    return {p.name for p in urls.urlpatterns}


@pytest.mark.parametrize("mode", ["light", "dark"])
def test_every_console_screen_has_no_serious_or_critical_axe_violation(live_server, browser, screens, mode):
    visited = {name for name, _, _ in screens}
    assert visited | set(NOT_A_PAGE) == _urls_names(), f"screens not checked: {sorted(_urls_names() - visited - set(NOT_A_PAGE))}"
    context = browser.new_context(viewport={"width": 1280, "height": 800}, color_scheme=mode)
    page = context.new_page()
    axe = Axe()
    problems = []
    # The sign-in page first, signed out; then everything else as the administrator (every control).
    page.goto(f"{live_server.url}/login/")
    problems += _check(axe, page, "login", mode)
    page.fill("#id_username", "ada.admin")
    page.fill("#id_password", PASSWORD)
    page.click("button:has-text('Sign in')")
    page.wait_for_load_state()
    for name, path, act in screens:
        if name == "login":
            continue
        page.goto(f"{live_server.url}{path}")
        if act is not None:
            act(page)
        problems += _check(axe, page, name, mode)
    context.close()
    assert not problems, "\n".join(problems)
