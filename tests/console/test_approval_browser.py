"""The approval screen in Chromium at 1280x800: the decision and what it will do come first.

Three calls of the kinds that hurt at 3 a.m.: a conflict, an authoritative absence after the
receiver forgot the key, and a possible duplicate. For each, the decision form, its submit button and
the retry's consequence sentence are inside the first screen without scrolling.
"""

import json
import os
import shutil
from datetime import timedelta

import pytest
from django.utils import timezone

from tests.console.helpers import CONFLICT_ARGS
from tests.console.browser import ARTIFACTS, CHROMIUM, DOCS, shot, signed_in

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is absent (apt-get install chromium)"),
]

FOLD = 800


def first_screen(page, name: str) -> None:
    """The first 1280x800 screen, light and dark; RECKON_UPDATE_DOCS_SCREENSHOT=1 puts them in docs/."""
    ARTIFACTS.mkdir(exist_ok=True)
    for mode, suffix in (("light", ""), ("dark", "-dark")):
        page.emulate_media(color_scheme=mode)
        path = ARTIFACTS / f"{name}{suffix}.png"
        page.screenshot(path=str(path))
        if os.environ.get("RECKON_UPDATE_DOCS_SCREENSHOT"):
            shutil.copy(path, DOCS / path.name)
    page.emulate_media(color_scheme="light")


def below_fold(page, selector: str) -> bool:
    box = page.locator(selector).bounding_box()
    return box is None or box["y"] + box["height"] > FOLD


def _duplicate_run(tmp_path) -> str:
    """An imported run whose agent started the same correction twice under one key and only the
    second start completed: the first is uncertain and a possible duplicate of it."""
    from runs.importer import paths_import

    ts = (timezone.now() - timedelta(minutes=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
    args = {**CONFLICT_ARGS, "reference": "C-802"}
    lines = [
        {"seq": 1, "type": "run_started", "ts": ts, "payload": {"run_id": "run-dup"}},
        {"seq": 2, "type": "tool_call_started", "ts": ts, "payload": {"call_id": "c1", "name": "post_correction", "arguments": args, "idempotency_key": "dupkey000000000000000001", "signature": "s"}},
        {"seq": 3, "type": "tool_call_started", "ts": ts, "payload": {"call_id": "c2", "name": "post_correction", "arguments": args, "idempotency_key": "dupkey000000000000000001", "signature": "s"}},
        {"seq": 4, "type": "tool_call_completed", "ts": ts, "payload": {"call_id": "c2", "name": "post_correction", "content": "posted", "is_error": False, "idempotency_key": "dupkey000000000000000001", "signature": "s"}},
    ]
    path = tmp_path / "run-dup.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    results = paths_import([str(path)])
    assert results[0].outcome == "imported", results[0].line()
    return "run-dup"


@pytest.fixture
def three_calls(conflict_call, tmp_path):
    from demo.management.commands.demo import scenario_run_create
    from recovery.models import UncertainCall
    from recovery.detection import uncertain_calls_detect
    from recovery.reconcile import reconcile_pass

    # Started 83 days ago; the receiver keeps keys 24 hours, so it forgot this one 82 days ago.
    scenario_run_create(run_id="run-expired", tool="post_correction", arguments={**CONFLICT_ARGS, "reference": "C-803"}, started_minutes_ago=83 * 1440, ledger=None)
    reconcile_pass(due_only=False)
    _duplicate_run(tmp_path)  # declared uncertain, not reconciled yet: open when a person looks at it
    uncertain_calls_detect(run_id="run-dup")
    expired = UncertainCall.objects.get(run_id="run-expired")
    dup = UncertainCall.objects.get(run_id="run-dup", call_id="c1")
    assert expired.state == "escalated" and expired.last_outcome == "absent", (expired.state, expired.last_outcome)
    assert dup.possible_duplicate and dup.state == "open", (dup.possible_duplicate, dup.state)
    return {"conflict": conflict_call, "expired": expired, "duplicate": dup}


def test_the_decision_and_its_consequence_are_above_the_fold_for_a_conflict_an_expired_key_and_a_duplicate(live_server, page, oncall, three_calls):
    page.set_viewport_size({"width": 1280, "height": FOLD})
    signed_in(page, live_server, oncall)
    expected = {
        "conflict": "The receiver already holds a different operation under this key",
        "expired": "it forgot this key on",
        "duplicate": "The same action already completed elsewhere in this run",
    }
    for name, call in three_calls.items():
        page.goto(f"{live_server.url}/calls/{call.pk}/")
        assert page.evaluate("window.scrollY") == 0
        # Without a chosen zone, hovering a UTC time shows it in the browser's own (console.js).
        assert page.locator("#facts-h ~ dl time").first.get_attribute("title"), "no local time on hover"
        shot(page, f"approval-{name}-1280x800")
        if name == "conflict":
            first_screen(page, "approval-screen")
        for sel in ("#summary", "#decide form", "#cons-retry", "#cons-not", "#decide-submit"):
            assert page.locator(sel).is_visible() and not below_fold(page, sel), (name, sel, page.locator(sel).bounding_box())
        assert expected[name] in page.inner_text("#cons-retry"), (name, page.inner_text("#cons-retry"))
        assert "840.00 GBP" in page.inner_text("#cons-retry") and "account [masked]" in page.inner_text("#cons-retry")
        # Evidence, raw responses and history are there, collapsed.
        for d in ("#payload-d", "#attempts-d", "#history-d"):
            assert page.locator(d).get_attribute("open") is None
    # On a phone-sized screen the same page reflows without sideways scrolling.
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"{live_server.url}/calls/{three_calls['conflict'].pk}/")
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    # "What differs" stacks each field as a card there: a four-column table at this width broke
    # every name and value letter by letter ("te/na/nt").
    widths = page.eval_on_selector_all("#conflict tbody tr > *", "els => els.map(e => [e.textContent.trim().slice(0, 20), e.getBoundingClientRect().width])")
    table_w = page.locator("#conflict table").bounding_box()["width"]
    assert widths and all(w >= 0.8 * table_w for _, w in widths), (table_w, widths)
    shot(page, "approval-conflict-390")
    page.set_viewport_size({"width": 1280, "height": FOLD})
    # The expired key, in words: the date it was forgotten and what a retry may do a second time.
    page.goto(f"{live_server.url}/calls/{three_calls['expired'].pk}/")
    retry = page.inner_text("#cons-retry")
    assert "Risk of doing it twice" in retry and "a second time" in retry
    # A decision sent without a reason: the errors stand next to the form, and focus moves to them.
    page.check("#choice-not")
    page.click("#decide-submit")
    page.wait_for_selector("#decide-errors")
    assert page.evaluate("document.activeElement.id") == "decide-errors"
    assert "Give a reason" in page.inner_text("#decide-errors")
    box = page.locator("#decide-errors").bounding_box()
    assert 0 <= box["y"] < FOLD


def test_a_decider_reveals_both_sides_of_a_masked_conflict_and_each_reveal_is_recorded(live_server, page, oncall, demo_policies):
    from access.models import AccessRecord
    from demo.management.commands.demo import scenario_run_create
    from recovery.models import UncertainCall
    from recovery.reconcile import reconcile_pass

    # The ledger holds the correction under the key, posted to another account: the differing
    # field is the sensitive one, masked on both sides until someone who may decide reveals it.
    scenario_run_create(run_id="run-masked", tool="post_correction", arguments=CONFLICT_ARGS, started_minutes_ago=20, ledger={**CONFLICT_ARGS, "account": "AC-9917"})
    reconcile_pass(due_only=False)
    call = UncertainCall.objects.get(run_id="run-masked")
    assert call.last_outcome == "conflict"
    page.set_viewport_size({"width": 1280, "height": FOLD})
    signed_in(page, live_server, oncall, f"/calls/{call.pk}/")
    row = page.locator("#conflict tr", has_text="account")
    assert row.locator("td").nth(0).inner_text().startswith("[masked]") and row.locator("td").nth(1).inner_text().startswith("[masked]")
    assert "differs" in row.inner_text()
    assert "AC-4020" not in page.content() and "AC-9917" not in page.content()
    for i, side in enumerate(("intended", "observed")):
        form = row.locator(f"form.reveal:has(input[name='side'][value='{side}'])")
        form.locator("input[name='reason']").fill(f"INC-41: which account did the ledger post to ({side})")
        form.locator("button").click()
        page.wait_for_selector(f"#conflict tr:has-text('account') td:nth-of-type({i + 1}) .revealed")
    cells = row.locator("td")
    assert "AC-4020" in cells.nth(0).inner_text() and "AC-9917" in cells.nth(1).inner_text()
    shot(page, "approval-decider-reveal")
    records = list(AccessRecord.objects.filter(run_id="run-masked").order_by("id"))
    assert [(r.actor_name, r.fields, r.front_end) for r in records] == [
        ("olivia.oncall", ["arguments.account"], "console"),
        ("olivia.oncall", ["evidence.observed.account"], "console"),
    ], [(r.actor_name, r.fields, r.front_end) for r in records]
    assert records[1].seq != records[0].seq == call.start_seq
