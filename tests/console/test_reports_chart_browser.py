"""The reports' trend chart in Chromium: its x labels never overlap, at 1280 px and at 390 px, for
the periods whose labels crowd most (30 days drawn per day and 90 drawn per week, ending at a month's
end, where the longest day numbers meet the last label)."""

import os

import pytest

from tests.console.browser import CHROMIUM, signed_in
from tests.reports.history import history_build

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is absent (apt-get install chromium)"),
]

PERIODS = (("2026-11-01", "2026-11-30"), ("2026-10-02", "2026-10-31"), ("2026-09-02", "2026-11-30"), ("2026-11-24", "2026-11-30"), ("2026-01-01", "2026-12-01"))
BOXES = "() => [...document.querySelectorAll('#trend-h ~ svg text.x-tick')].map(t => { const b = t.getBoundingClientRect(); return [t.textContent, b.left, b.right]; })"


def _overlaps(boxes: list) -> list:
    return [(a[0], b[0]) for a, b in zip(boxes, boxes[1:]) if a[2] > b[1]]  # left to right, as drawn


def test_the_trend_chart_s_x_labels_never_overlap(live_server, page, manager):
    history_build()
    page.set_viewport_size({"width": 1280, "height": 800})
    signed_in(page, live_server, manager, f"/reports/?since={PERIODS[0][0]}&until={PERIODS[0][1]}")
    for since, until in PERIODS:
        url = f"{live_server.url}/reports/?since={since}&until={until}"
        if page.url != url:
            page.set_viewport_size({"width": 1280, "height": 800})
            page.goto(url)
        # Each period's page loaded once and read at both widths: the server draws one chart whatever
        # the window (an SVG the stylesheet scales), and no script of the page looks at the width, so
        # the labels laid out at 390 px after the window narrows are those a phone lays out.
        for width, height in ((1280, 800), (390, 844)):
            page.set_viewport_size({"width": width, "height": height})
            boxes = page.evaluate(BOXES)
            assert len(boxes) >= 2, (width, since, boxes)
            assert all(a[1] < b[1] for a, b in zip(boxes, boxes[1:])), boxes
            assert _overlaps(boxes) == [], (width, since, until, boxes)
            # The last bucket is always named, and every label stays inside the chart.
            chart = page.locator("#trend-h ~ svg").bounding_box()
            assert boxes[0][1] >= chart["x"] - 0.5 and boxes[-1][2] <= chart["x"] + chart["width"] + 0.5, (width, since, boxes)
