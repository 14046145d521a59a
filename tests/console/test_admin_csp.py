"""The Django admin as deployed: DEBUG off behind the TLS proxy, the production CSP, in Chromium.

The admin's own templates and scripts must work under the policy the console lives with: no CSP
violation reported by the browser on its sign-in page, index, changelists (with and without
actions), a change form and a search, and the pages do their jobs (sign in, list, filter, add).
"""

from __future__ import annotations

import os

import pytest

from tests.console.helpers import PASSWORD
from tests.console.browser import CHROMIUM, shot
from tests.production import PROXY_HEADERS

pytestmark = [pytest.mark.browser, pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is absent")]


def _watch(page) -> list[str]:
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" or "Content Security Policy" in m.text else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.add_init_script("document.addEventListener('securitypolicyviolation', e => console.error('CSP violation: ' + e.violatedDirective + ' ' + e.blockedURI))")
    return problems


def test_the_admin_signs_in_lists_and_adds_under_the_production_csp(browser, prod_server, admin_user, oncall):
    ctx = browser.new_context(viewport={"width": 1280, "height": 900}, extra_http_headers=PROXY_HEADERS)
    page = ctx.new_page()
    problems = _watch(page)
    url = prod_server.url
    page.goto(f"{url}/admin/")
    page.wait_for_url(f"{url}/admin/login/?next=/admin/")
    policy = page.context.request.get(f"{url}/admin/login/").headers["content-security-policy"]
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy  # the console's policy, unchanged
    page.fill("#id_username", "ada.admin")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(f"{url}/admin/")
    assert page.locator("#site-name").count() == 1
    # admin/css/base.css is applied: the header is laid out by the stylesheet, not inline styles.
    assert page.evaluate("getComputedStyle(document.querySelector('#header')).display") == "flex"

    # A changelist with actions (users) and its search, sidebar and filters.
    page.goto(f"{url}/admin/auth/user/")
    assert page.locator("#result_list tbody tr").count() == 2
    page.fill("#searchbar", "olivia")
    page.press("#searchbar", "Enter")
    page.wait_for_url("**q=olivia**")
    assert page.locator("#result_list tbody tr").count() == 1
    page.click("#toggle-nav-sidebar")  # nav_sidebar.js runs
    page.check("#result_list tbody input.action-select")  # actions.js counts the selection
    assert "1 of 1 selected" in page.inner_text(".action-counter")
    shot(page, "admin-changelist")

    # A change form with the admin's widgets (the two-box group and permission pickers).
    page.goto(f"{url}/admin/auth/user/{oncall.pk}/change/")
    page.wait_for_selector("#id_groups_from")  # SelectFilter2.js built the picker
    assert page.locator("#id_groups_to option").count() == 1

    # The token admin: its add form, then its changelist.
    page.goto(f"{url}/admin/access/apitoken/add/")
    page.fill("#id_name", "ci agent")
    page.check("input[name=scopes][value=append]")
    page.click("input[name=_save]")
    page.wait_for_selector(".messagelist")
    assert "ci agent" in page.inner_text("#result_list")

    # The popup changelist a related-field lookup opens (no actions, popup_response scripts).
    page.goto(f"{url}/admin/auth/group/?_to_field=id&_popup=1")
    assert page.locator("#result_list").count() == 1
    shot(page, "admin-popup-changelist")

    assert problems == []
    ctx.close()


def test_no_admin_hides_both_action_bars_which_would_bring_the_admins_inline_style():
    """Django's change_list.html adds an inline <style> only when a ModelAdmin turns off both action
    bars; the CSP would block it (the list's first column would be laid out wrongly). None does."""
    from django.contrib import admin

    offenders = [type(m).__name__ for m in admin.site._registry.values() if not m.actions_on_top and not m.actions_on_bottom]
    assert offenders == [], f"{offenders}: keep an action bar, or give the admin a CSP nonce for its inline style (docs/security.md)"
