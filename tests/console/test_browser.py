"""The console in a real browser: Debian's Chromium driven by Playwright against a live server."""

import hashlib
import os
from pathlib import Path

import pytest

from tests.console.browser import CHROMIUM, shot, signed_in

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is absent (apt-get install chromium)"),
]


def test_an_on_call_operator_resolves_a_conflict_escalation_and_it_appears_in_the_timeline(live_server, page, oncall, conflict_call):
    page.set_viewport_size({"width": 1280, "height": 900})
    signed_in(page, live_server, oncall)
    page.click(f"a[href='/calls/{conflict_call.pk}/']")
    page.wait_for_selector("#conflict")
    assert "480.00" in page.inner_text("#conflict") and "840.00" in page.inner_text("#conflict")
    assert "840.00 GBP" in page.inner_text("#cons-retry")
    shot(page, "approval-screen")
    # Keyboard: the decision is reachable and choosable without a mouse.
    page.focus("input[value='not_happened']")
    page.keyboard.press("Space")
    page.fill("#id_reason", "Ledger team confirmed C-801 was reversed; the agent must not post it again")
    page.click("#decide-submit")
    page.wait_for_selector(".messages .success")
    assert "Recorded" in page.inner_text(".messages")
    assert page.get_attribute("#call-state", "data-state") == "resolved" and page.inner_text("#call-state").startswith("Resolved: it did not happen")
    page.click("#history-d summary")
    page.click("a:has-text('Full timeline')")
    row = page.locator("tr", has_text="approval_decided").first
    assert "olivia.oncall" in row.inner_text() and "not_happened" in row.inner_text()
    shot(page, "run-timeline-after-decision")


def test_back_from_a_bulk_action_that_cannot_be_prepared_finds_the_same_calls_ticked(live_server, page, oncall, conflict_call):
    from tests.console.helpers import _calls

    _calls(3)
    page.set_viewport_size({"width": 1280, "height": 900})
    signed_in(page, live_server, oncall, "/queue/?tenant=acme")
    boxes = page.locator("input[name='ids']")
    chosen = [boxes.nth(0).get_attribute("value"), boxes.nth(2).get_attribute("value")]
    for pk in chosen:
        page.check(f"#sel-{pk}")
    page.select_option("#bulk-action", "assign")  # and no assignee named: it cannot be prepared
    page.click("button:has-text('Preview')")
    page.wait_for_selector("text=The bulk action cannot be prepared")
    page.click("a:has-text('Back to the queue')")
    page.wait_for_selector("#queue-filters")
    assert page.input_value("#id_tenant") == "acme"
    ticked = [b.get_attribute("value") for b in page.locator("input[name='ids']:checked").all()]
    assert sorted(ticked) == sorted(chosen)


def test_a_compliance_reviewer_sees_no_decision_controls_and_exports_a_run(live_server, page, compliance, conflict_call):
    page.set_viewport_size({"width": 420, "height": 900})  # a narrow screen
    signed_in(page, live_server, compliance, f"/calls/{conflict_call.pk}/")
    assert page.locator("input[name='decision']").count() == 0
    assert page.locator("#decide-submit").count() == 0
    assert "not decide" in page.inner_text("#no-decide")
    shot(page, "compliance-call-narrow")
    page.goto(f"{live_server.url}/runs/run-conflict/")
    with page.expect_download() as dl:
        page.click("a:has-text('JSON Lines')")
    body = Path(dl.value.path()).read_bytes()
    assert body.startswith(b'{"seq": 1, "type": "run_started"')
    digest_page = page.request.get(f"{live_server.url}/runs/run-conflict/export.jsonl.sha256").text()
    assert digest_page.split()[0] == hashlib.sha256(body).hexdigest()
    shot(page, "compliance-run-audit")


def test_two_sessions_decide_the_same_call_and_exactly_one_wins(live_server, browser, oncall, conflict_call, roles):
    from runs.models import Event
    from tests.console.helpers import _user

    oscar = _user("oscar.oncall", "oncall")
    pages = []
    for user in (oncall, oscar):
        name = user.username
        ctx = browser.new_context(viewport={"width": 1280, "height": 900})
        p = ctx.new_page()
        signed_in(p, live_server, user, f"/calls/{conflict_call.pk}/")
        p.check("input[value='escalate']")
        p.fill("#id_reason", f"{name} takes this to the ledger team")
        pages.append(p)
    for p in pages:
        p.click("#decide-submit")
        p.wait_for_load_state()
    texts = [p.inner_text(".messages") if p.locator(".messages").count() else p.inner_text("#stale") for p in pages]
    won = [t for t in texts if t.startswith("Recorded")]
    lost = [t for t in texts if "acted on this call first" in t and "Your decision was not recorded" in t]
    assert len(won) == 1 and len(lost) == 1, texts
    shot(pages[1], "second-session-refused")
    assert Event.objects.filter(run_id="run-conflict", type="approval_decided").count() == 1
    for p in pages:
        p.context.close()


def test_a_compliance_reviewer_reveals_a_value_with_a_reason_and_finds_it_in_the_access_record(live_server, page, compliance):
    from django.test import Client

    from access.models import AccessRecord
    from access.tokens import token_create
    from tests.access.seed import SECRET, seed_runs

    seeded = seed_runs()
    _, secret = token_create(name="ledger-sync agent", scopes=["append", "read"])
    Client(HTTP_AUTHORIZATION=f"Bearer {secret}").get("/api/runs/run-globex/state")  # a token's unmasked read: recorded
    page.set_viewport_size({"width": 1280, "height": 800})
    signed_in(page, live_server, compliance, f"/calls/{seeded['call'].pk}/")
    page.click("#payload-d summary")
    form = page.locator("#payload form.reveal").first
    form.locator("input[name='reason']").fill("LEDGER-88: confirm the account with the customer")
    form.locator("button").click()
    page.wait_for_selector("#payload .revealed")
    assert SECRET in page.inner_text("#payload .revealed")
    shot(page, "compliance-reveal")
    page.click("nav a:has-text('Access record')")
    page.wait_for_selector("#access-records")
    rows = page.inner_text("#access-records")
    assert "LEDGER-88: confirm the account with the customer" in rows and "arguments.account of event" in rows
    assert "ledger-sync agent" in rows and "GET /api/runs/run-globex/state" in rows
    assert SECRET not in rows  # the record says what was shown, never the value
    shot(page, "access-record-wide")
    page.fill("#a-run", "run-acme")
    page.click("button:has-text('Search')")
    page.wait_for_url("**/access/?*run=run-acme*")
    assert "ledger-sync agent" not in page.inner_text("#access-records")
    page.set_viewport_size({"width": 390, "height": 800})
    page.goto(f"{live_server.url}/access/")
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, f"the page scrolls sideways at 390 px ({width} px wide)"
    shot(page, "access-record-narrow")
    page.goto(f"{live_server.url}/runs/run-acme/")
    assert "LEDGER-88" in page.inner_text("#reveals")
    shot(page, "run-audit-reveals-narrow")
    assert AccessRecord.objects.filter(front_end="console", actor_name="colin.compliance").count() == 1
