"""The console's lists behave alike: filters by people, tools and tenants match any part of the
name ignoring case, a bad value is a 400 with the message in the page, pages go both ways with a
total, the queue shows as many rows as "Per page" says, and the decision log reads in words."""

from __future__ import annotations

import re

import pytest

from tests.console.helpers import client_for
from tests.console.helpers import _calls


def _rows(html: str) -> int:
    return len(re.findall(r'name="ids" value="\d+"', html))


def test_the_queue_shows_as_many_rows_as_per_page_says(oncall):
    _calls(60)
    html = client_for(oncall).get("/queue/").text
    selected = re.search(r'<select name="limit"[^>]*>.*?<option value="(\d+)" selected>', html, re.S)
    assert selected is not None, "no page size is shown selected"
    assert _rows(html) == int(selected.group(1)) == 50
    assert _rows(client_for(oncall).get("/queue/", {"limit": 25}).text) == 25


def test_the_queue_pages_forward_and_back_with_a_total(oncall):
    _calls(60)
    c = client_for(oncall)
    first = c.get("/queue/", {"limit": 25}).text
    assert "page 1 of 3" in first and "60 in all" in first and "Previous page" not in first
    nxt = re.search(r'<a class="button" rel="next" href="([^"]+)"', first).group(1).replace("&amp;", "&")
    second = c.get("/queue/" + nxt).text
    assert "page 2 of 3" in second
    keys1 = set(re.findall(r"key-\d{4}", first)) or set(re.findall(r'value="(\d+)" id="sel', first))
    prev = re.search(r'<a class="button" rel="prev" href="([^"]+)"', second).group(1).replace("&amp;", "&")
    back = c.get("/queue/" + prev).text
    assert re.findall(r'name="ids" value="(\d+)"', back) == re.findall(r'name="ids" value="(\d+)"', first)
    third = c.get("/queue/" + re.search(r'rel="next" href="([^"]+)"', second).group(1).replace("&amp;", "&")).text
    assert "page 3 of 3" in third and _rows(third) == 10 and 'rel="next"' not in third
    assert keys1


def test_tool_and_tenant_filters_match_any_part_ignoring_case(oncall):
    _calls(3)
    c = client_for(oncall)
    assert _rows(c.get("/queue/", {"tool": "CORRECTION"}).text) == 3
    assert _rows(c.get("/queue/", {"tenant": "acme"}).text) == 3
    assert _rows(c.get("/queue/", {"tool": "refund"}).text) == 0


def test_mine_and_unassigned_views(oncall, conflict_call):
    from recovery.decisions import call_claim

    _calls(3)
    row = conflict_call
    call_claim(pk=row.pk, user=oncall, seen_version=row.version)
    c = client_for(oncall)
    mine = c.get("/queue/", {"view": "mine"}).text
    assert re.findall(r'name="ids" value="(\d+)"', mine) == [str(row.pk)]
    unassigned = c.get("/queue/", {"view": "unassigned"}).text
    assert _rows(unassigned) == 3 and str(row.pk) not in re.findall(r'name="ids" value="(\d+)"', unassigned)
    bad = c.get("/queue/", {"view": "theirs"})
    assert bad.status_code == 400 and "view must be mine or unassigned" in bad.text


def test_the_mine_view_is_offered_only_to_people_who_can_hold_calls(oncall, manager, compliance, admin_user):
    # On call claims and is assigned calls; the administrator may do anything. Managers and
    # compliance reviewers can neither claim nor be handed a call, so "Mine" would always be empty.
    for user, offered in ((oncall, True), (admin_user, True), (manager, False), (compliance, False)):
        html = client_for(user).get("/queue/").text
        tabs = re.search(r'<ul class="views"[^>]*>(.*?)</ul>', html, re.S).group(1)
        assert ("?view=mine" in tabs) is offered and "Unassigned" in tabs and ">All<" in tabs, user.username
        assert ('<option value="mine"' in html) is offered, user.username
    # A bookmarked "Mine" is explained, not answered with an empty list.
    resp = client_for(manager).get("/queue/", {"view": "mine"})
    assert resp.status_code == 400 and "your role cannot claim or be assigned calls" in resp.text and 'id="queue-filter-error"' in resp.text


# Each message names the filter by the label the screen shows beside it ("From", not "since").
DECISION_LOG_BAD = [
    ("kind", "robot", "By must be people (person) or rules (automatic), got robot"),
    ("disposition", "maybe", "Decision or disposition must be one of happened, retry_same_key"),
    ("since", "yesterday", "From must be a date as YYYY-MM-DD"),
    ("until", "2026-13-01", "To must be a date as YYYY-MM-DD"),
]


@pytest.mark.parametrize("param,value,message", DECISION_LOG_BAD)
def test_the_decision_log_answers_a_bad_filter_with_400_and_the_message_in_the_page(manager, param, value, message):
    resp = client_for(manager).get("/decisions/", {param: value})
    assert resp.status_code == 400
    assert message in resp.text and 'id="filter-error"' in resp.text and 'id="d-by"' in resp.text
    label = message.split(" must ")[0]
    assert f">{label}" in resp.text, f"no filter is labelled {label!r} on the screen"


@pytest.mark.parametrize(
    "param,value,message",
    [("front_end", "fax", "Through must be one of"), ("since", "yesterday", "From must be a date as YYYY-MM-DD"), ("until", "soon", "To must be a date as YYYY-MM-DD")],
)
def test_the_access_record_names_a_bad_filter_by_its_label(compliance, param, value, message):
    resp = client_for(compliance).get("/access/", {param: value})
    assert resp.status_code == 400 and message in resp.text
    assert f">{message.split(' must ')[0]}" in client_for(compliance).get("/access/").text
    # Answered on the screen itself, beside its filters (as the decision log answers), so the
    # value can be corrected in place.
    assert '<h1>Access record</h1>' in resp.text and 'role="search"' in resp.text and "Bad request" not in resp.text
    assert re.search(r'role="alert" id="filter-error">The filter cannot be used: [^<]*' + re.escape(message), resp.text)


def test_the_access_record_with_nothing_to_show_says_so(compliance):
    resp = client_for(compliance).get("/access/", {"who": "nobody-by-this-name"})
    assert resp.status_code == 200 and "No access records match." in resp.text


def test_the_decision_log_is_newest_first_by_decision_time_and_reads_v1_decisions_in_words(manager, v1_runs):
    from console.decision_log import decisions_search
    from runs.models import Event

    items = decisions_search(limit=100).items
    assert items, "the v1 fixtures hold decisions"
    assert [e.ts for e in items] == sorted((e.ts for e in items), reverse=True)
    html = client_for(manager).get("/decisions/").text
    v1 = Event.objects.filter(type="approval_decided", v=1).first()
    assert v1 is not None
    assert "decided <strong>True</strong>" not in html and "decided <strong>False</strong>" not in html
    assert ("<strong>approved</strong> the call" in html) or ("<strong>declined</strong> the call" in html)


def test_the_decision_log_filters_people_by_any_part_of_the_name(manager, v1_runs):
    from console.decision_log import decisions_search

    everyone = [e for e in decisions_search(limit=100).items if e.payload.get("by")]
    assert everyone
    name = everyone[0].payload["by"]
    part = name[1:4].upper()
    found = decisions_search(by=part, limit=100).items
    assert found and all(part.casefold() in (e.payload.get("by") or e.payload.get("rule") or "").casefold() for e in found)


def test_the_access_record_filters_people_by_any_part_of_the_name(compliance, conflict_call):
    from access.services import access_record_write
    from access.tokens import principal_for_user

    access_record_write(who=principal_for_user(compliance), front_end="console", run_id="run-conflict", why="a check", fields=["arguments.account"])
    html = client_for(compliance).get("/access/", {"who": "COLIN"}).text
    assert "a check" in html
    assert "a check" not in client_for(compliance).get("/access/", {"who": "dana"}).text
