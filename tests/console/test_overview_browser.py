"""The overview in Chromium: 1-2-5 ticks with labels that fit, and imported history placed in time
by its own events (a call settled in September is not drawn as open over today)."""

import os
import re

import pytest

from tests.console.helpers import FIXTURES
from tests.console.browser import CHROMIUM, shot, signed_in

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is absent (apt-get install chromium)"),
]


def test_the_overview_chart_has_nice_ticks_that_fit_and_draws_no_long_settled_call_as_open(live_server, page, manager, conflict_call):
    from recovery.models import UncertainCall
    from runs.importer import paths_import

    # Reference runs recorded in September, imported now: one call settled then, one still in conflict.
    results = paths_import([str(FIXTURES / "events" / "v2")])
    assert all(r.outcome == "imported" for r in results), [r.line() for r in results]
    assert UncertainCall.objects.filter(run_id="run-c771-reconciled", state="resolved").exists()
    open_irreversible = UncertainCall.objects.unresolved().filter(risk_class="irreversible").count()
    page.set_viewport_size({"width": 1280, "height": 800})
    signed_in(page, live_server, manager, "/overview/")
    # Totals and what needs attention come first, inside the first screen.
    for sel in ("#total-open", "#overdue-h"):
        assert page.locator(sel).bounding_box()["y"] < 800
    chart = page.locator("#chart1-h ~ svg")
    ticks = [int(t.replace(",", "")) for t in chart.locator("text.y-tick").all_text_contents()]
    step = ticks[1] - ticks[0]
    assert ticks[0] == 0 and re.fullmatch(r"[125]0*", str(step)) and ticks == list(range(0, ticks[-1] + 1, step)), ticks
    box = chart.bounding_box()
    for label in chart.locator("text").all():
        b = label.bounding_box()
        assert box["x"] <= b["x"] and b["x"] + b["width"] <= box["x"] + box["width"] + 0.5, (label.text_content(), b, box)
    # The numbers behind the chart: every instant of the last 24 hours shows the calls open now and
    # nothing more; the September call is not counted as open at any of them.
    page.click("#chart1-h ~ details summary")
    col = [c.lower() for c in page.locator("#chart1-h ~ details thead th").all_inner_texts()].index("irreversible")
    values = [int(r.locator("td").nth(col).inner_text()) for r in page.locator("#chart1-h ~ details tbody tr").all()]
    assert len(values) == 25 and set(values) <= {open_irreversible - 1, open_irreversible}, (values, open_irreversible)
    assert values[-1] == open_irreversible
    shot(page, "overview-1280x800")
