"""The console as deployed: gunicorn with DEBUG off behind a TLS-terminating proxy (the proxy's
X-Forwarded-Proto sent by the browser), static files from WhiteNoise, the strict CSP, in Chromium."""

from __future__ import annotations

import os

import pytest

from tests.console.helpers import PASSWORD
from tests.console.browser import CHROMIUM, shot
from tests.production import PROXY_HEADERS

pytestmark = [pytest.mark.browser, pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is absent")]


def test_the_deployed_console_loads_htmx_refreshes_and_records_a_decision_under_the_csp(browser, prod_server, oncall, conflict_call):
    ctx = browser.new_context(viewport={"width": 1280, "height": 900}, extra_http_headers=PROXY_HEADERS)
    page = ctx.new_page()
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" or "Content Security Policy" in m.text else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.add_init_script("document.addEventListener('securitypolicyviolation', e => console.error('CSP violation: ' + e.violatedDirective + ' ' + e.blockedURI))")
    page.clock.install()
    url = prod_server.url
    page.goto(f"{url}/login/")
    page.fill("#id_username", "olivia.oncall")
    page.fill("#id_password", PASSWORD)
    page.click("button:has-text('Sign in')")
    page.wait_for_url(f"{url}/queue/")
    assert page.evaluate("typeof window.htmx") == "object"
    assert page.evaluate("htmx.config.includeIndicatorStyles") is False and page.evaluate("htmx.config.allowEval") is False
    assert page.evaluate("getComputedStyle(document.querySelector('header.site')).display") == "flex"  # console.css loaded
    # The queue's own polling (every 15 s): let the page's clock run past it.
    with page.expect_response(lambda r: r.url.startswith(f"{url}/queue/") and r.request.headers.get("hx-request") == "true") as refresh:
        page.clock.run_for(16_000)
    assert refresh.value.status == 200 and "no-store" in refresh.value.headers["cache-control"]
    page.click(f"a[href='/calls/{conflict_call.pk}/']")
    page.wait_for_selector("#conflict")
    page.check("input[value='not_happened']")
    page.fill("#id_reason", "Ledger team confirmed C-801 was reversed")
    page.click("#decide-submit")
    page.wait_for_selector(".messages .success")
    assert page.get_attribute("#call-state", "data-state") == "resolved" and page.inner_text("#call-state").startswith("Resolved: it did not happen")
    shot(page, "production-approval-screen")
    assert problems == []
    page.goto(f"{url}/runs/no-such-run/")
    assert "No run" in page.inner_text("main") or "no-such-run" in page.inner_text("main")
    assert page.locator("a:has-text('Back to the console')").count() == 1
    shot(page, "production-404")
    ctx.close()
