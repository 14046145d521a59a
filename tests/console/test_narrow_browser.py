"""Reading the console on a phone (390 px wide) in Chromium: tables become labelled stacked rows
rather than columns so thin that words are cut in the middle of their letters."""

import os

import pytest

from tests.console.browser import CHROMIUM, shot, signed_in

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is absent (apt-get install chromium)"),
]

# Every word (a run of letters, digits and underscores) of the elements matched, whose letters the
# browser laid out on more than one line: "escalated" shown as "esc / ala / ted".
CUT_WORDS = """sel => {
  const cut = [];
  for (const root of document.querySelectorAll(sel)) {
    const walk = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    for (let node = walk.nextNode(); node; node = walk.nextNode()) {
      for (const m of node.data.matchAll(/\\w{4,}/g)) {
        const r = document.createRange();
        r.setStart(node, m.index);
        r.setEnd(node, m.index + m[0].length);
        const tops = new Set([...r.getClientRects()].filter(b => b.width > 0).map(b => Math.round(b.top)));
        if (tops.size > 1) cut.push(m[0]);
      }
    }
  }
  return cut;
}"""


def test_the_overview_tables_keep_their_words_whole_at_390_px(live_server, page, manager, v1_runs, conflict_call):
    page.set_viewport_size({"width": 390, "height": 844})
    signed_in(page, live_server, manager, "/overview/")
    assert page.locator("#overdue-h ~ .table-wrap tbody tr").count() >= 1  # something overdue to read
    cut = page.evaluate(CUT_WORDS, "#overdue-h ~ .table-wrap tbody, #risk-h ~ .table-wrap tbody")
    shot(page, "overview-390")
    assert not cut, f"words cut across lines at 390 px: {cut}"
    # Each stacked cell still says what it is (its label is drawn before it).
    labels = page.evaluate(
        "sel => [...document.querySelector(sel).querySelectorAll('td')].map(td => getComputedStyle(td, '::before').content)",
        "#overdue-h ~ .table-wrap tbody tr",
    )
    assert labels == ['"Call: "', '"Tool: "', '"Run: "', '"State: "', '"Who is on it: "', '"Deadline: "', '"Past deadline by: "'], labels
    labels = page.evaluate(
        "sel => [...document.querySelector(sel).querySelectorAll('td')].map(td => getComputedStyle(td, '::before').content)",
        "#risk-h ~ .table-wrap tbody tr",
    )
    assert '"Still open: "' in labels and '"Overdue: "' in labels, labels


def test_the_access_record_keeps_its_words_whole_at_390_px(live_server, page, compliance, conflict_call):
    from access.tokens import principal_for_user
    from access.services import access_record_write

    access_record_write(who=principal_for_user(compliance), front_end="export", run_id="run-conflict", why="GET /runs/run-conflict/export.jsonl", all_fields=True)
    page.set_viewport_size({"width": 390, "height": 844})
    signed_in(page, live_server, compliance, "/access/")
    assert page.locator("#access-records tbody tr").count() == 1
    cut = page.evaluate(CUT_WORDS, "#access-records tbody")
    shot(page, "access-390")
    assert not cut, f"words cut across lines at 390 px: {cut}"


def test_the_policies_keep_their_words_whole_at_390_px(live_server, page, admin_user, demo_policies):
    page.set_viewport_size({"width": 390, "height": 844})
    signed_in(page, live_server, admin_user, "/policies/")
    assert page.locator("#policies tbody tr").count() >= 5
    cut = page.evaluate(CUT_WORDS, "#policies tbody")
    shot(page, "policies-390")
    assert not cut, f"words cut across lines at 390 px: {cut}"


@pytest.mark.parametrize("width", [1280, 390])
def test_the_decision_forms_keyboard_order_follows_what_the_eye_reads(live_server, page, oncall, conflict_call, width):
    # Reason, then the evidence and escalation fields beside (or below) it, then the button: a
    # keyboard user choosing "it happened" meets the evidence field before the submit button.
    page.set_viewport_size({"width": width, "height": 844})
    signed_in(page, live_server, oncall, f"/calls/{conflict_call.pk}/")
    page.focus("#id_reason")
    order = []
    for _ in range(3):
        page.keyboard.press("Tab")
        order.append(page.evaluate("document.activeElement.id"))
    assert order == ["id_evidence_ref", "id_assignee", "decide-submit"], order
    reason, button, escalate = (page.locator(s).bounding_box() for s in ("#id_reason", "#decide-submit", "#id_assignee"))
    assert button["y"] > reason["y"] + reason["height"] - 1  # below the reason, as before
    if width == 390:
        assert button["y"] > escalate["y"] + escalate["height"] - 1  # and last on a phone
