"""A manager in Chromium reads the month's trend on the reports screen, at 1280x800 and 390 px,
and downloads its CSV files (the known history of tests/reports/history.py)."""

import csv
import io
import os
from pathlib import Path

import pytest

from tests.console.browser import CHROMIUM, artifact, shot, signed_in
from tests.reports.history import EXPECTED, history_build

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is absent (apt-get install chromium)"),
]


def _download(page, link_text: str) -> tuple[str, list[dict]]:
    with page.expect_download() as info:
        page.click(f"a:has-text('{link_text}')")
    d = info.value
    return d.suggested_filename, list(csv.DictReader(io.StringIO(Path(d.path()).read_text(encoding="utf-8"))))


def test_a_manager_reads_the_month_s_trend_and_downloads_the_csv(live_server, page, manager):
    history_build()
    page.set_viewport_size({"width": 1280, "height": 800})
    signed_in(page, live_server, manager, "/overview/")
    page.click("nav >> a:has-text('Reports')")
    page.wait_for_url(f"{live_server.url}/reports/")
    page.fill("#r-since", "2026-11-02")
    page.fill("#r-until", "2026-11-29")
    page.click("button:has-text('Show')")
    page.wait_for_selector("#report-period")
    assert "2026-11-02" in page.inner_text("#report-period") and "2026-11-29" in page.inner_text("#report-period")
    # The tables of times and of people arrive after the page, each in place of its "Loading".
    page.wait_for_selector(".deferred[aria-busy]", state="detached")
    for name, key in (("times-by-risk", "risk_class"), ("times-by-tool", "tool"), ("people", "person")):
        assert page.locator(f"#table-{name} tbody th").all_inner_texts() == [r[key] for r in EXPECTED[name]], name
    chart = page.locator("#trend-h ~ svg")
    assert chart.locator("polyline").count() == 3  # opened, resolved, overdue at end of day
    box = chart.bounding_box()
    for label in chart.locator("text.x-tick, text.y-tick").all():
        b = label.bounding_box()
        assert box["x"] <= b["x"] and b["x"] + b["width"] <= box["x"] + box["width"] + 0.5, label.text_content()
    shot(page, "reports-1280x800")
    page.locator("section[aria-labelledby='times-tool-h']").screenshot(path=str(artifact("reports-1280-times-by-tool")))
    page.locator("section[aria-labelledby='trend-h']").screenshot(path=str(artifact("reports-1280-trend")))
    name, trend = _download(page, "Trend (CSV)")
    assert name == "reckon-trend-2026-11-02-to-2026-11-29.csv"
    assert [int(r["opened"]) for r in trend] == [o for _, o, _, _ in EXPECTED["trend"]]
    _, calls = _download(page, "Every call of the period (CSV)")
    assert len(calls) == 13 and all("[masked]" in r["arguments"] for r in calls)

    page.set_viewport_size({"width": 390, "height": 844})
    page.reload()
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    svg_box = page.locator("#trend-h ~ svg").bounding_box()
    assert svg_box["width"] <= 390 and svg_box["height"] >= 120  # scaled down, not cut off
    # The smallest chart text, as drawn at this width, in CSS pixels: readable, not a smudge.
    sizes = page.evaluate("""() => [...document.querySelectorAll('#trend-h ~ svg text')].map(t => t.getBoundingClientRect().height)""")
    assert min(sizes) >= 9, sizes
    shot(page, "reports-390")
    page.screenshot(path=str(artifact("reports-390-top")), full_page=False)
    page.locator("section[aria-labelledby='trend-h']").screenshot(path=str(artifact("reports-390-trend")))
    page.click("#trend-h ~ details summary")
    assert page.locator("#table-trend tbody tr").count() == 28
    shot(page, "reports-390-numbers")


def test_a_table_that_cannot_be_loaded_says_so_and_offers_its_own_page(live_server, page, manager):
    history_build()
    page.set_viewport_size({"width": 390, "height": 844})
    # The server answers the people table with 503 (overloaded, say); the others load as usual.
    page.route("**/reports/people/**", lambda route: route.fulfill(status=503, body="busy"))
    signed_in(page, live_server, manager, "/reports/?since=2026-11-02&until=2026-11-29")
    page.wait_for_selector("#table-times-by-tool")
    box = page.locator("#deferred-people")
    box.locator("[role=alert]").wait_for()
    assert box.get_attribute("aria-busy") is None
    assert "This table could not be loaded (the server answered 503)." in box.inner_text()
    page.locator("section[aria-labelledby=people-h]").screenshot(path=str(artifact("report-people-failed-390")))
    page.unroute("**/reports/people/**")
    box.locator("a:has-text('Open it on a page of its own')").click()
    page.wait_for_selector("h1:has-text('Who decided')")
    assert page.locator("#table-people tbody th").all_inner_texts() == [r["person"] for r in EXPECTED["people"]]
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    shot(page, "report-people-390")
