"""Issue 31, finding 7, on the screens: a run of large (allowed) payloads shows them cut, with
their size bounded by how many it shows, never by how large they are, and a link to the rest;
the evidence report cuts them alike. Before, one manager's view of /runs/<id>/?at=N printed every
payload and the whole state document whole (199 MB from 40 events of 2.4 MB)."""

from __future__ import annotations

import json
import time

import pytest
from django.test import Client

from evidence.report import report_html
from access.shown import SHOWN_CHARS
from runs.leases import lease_acquire
from runs.store import NewEvent, events_append

pytestmark = pytest.mark.django_db

EVENTS = 40
SIZE = 250_000  # each just under RECKON_MAX_EVENT_BYTES (256 KiB): 10 MB of payloads
PAGE_BOUND = 1_500_000


@pytest.fixture
def big_run(db):
    lease = lease_acquire(run_id="run-huge", holder="agent", ttl_seconds=60)
    events_append(run_id="run-huge", epoch=lease.epoch, expected_seq=0, events=[NewEvent("run_started", {"run_id": "run-huge"})])
    for seq in range(1, EVENTS + 1):
        events_append(run_id="run-huge", epoch=lease.epoch, expected_seq=seq, events=[NewEvent("user_message", {"content": f"{seq}:" + "m" * SIZE})])
    return "run-huge"


def _signed_in(user):
    c = Client()
    c.force_login(user)
    return c


def test_the_run_screen_at_a_seq_stays_under_a_byte_bound_with_huge_payloads(manager, big_run):
    c = _signed_in(manager)
    began = time.monotonic()
    r = c.get(f"/runs/{big_run}/?at={EVENTS + 1}&expand=all")
    took = time.monotonic() - began
    assert r.status_code == 200
    assert len(r.content) < PAGE_BOUND, len(r.content)
    assert took < 15, took
    page = r.content.decode()
    assert "Cut: the page shows the first" in page and f"/runs/{big_run}/events/{EVENTS + 1}.json" in page
    assert f"/runs/{big_run}/state.json?at={EVENTS + 1}" in page and "cut here" in page


def test_a_cut_payload_is_whole_behind_its_link_and_so_is_the_state(manager, big_run):
    c = _signed_in(manager)
    r = c.get(f"/runs/{big_run}/events/7.json")
    assert r.status_code == 200 and r["Content-Type"].startswith("application/json")
    assert json.loads(r.content) == {"content": "6:" + "m" * SIZE}
    r = c.get(f"/runs/{big_run}/state.json", {"at": 3})
    assert r.status_code == 200
    state = json.loads(b"".join(r.streaming_content))
    assert [m["content"] for m in state["messages"]] == [f"{n}:" + "m" * SIZE for n in (1, 2)]
    assert c.get(f"/runs/{big_run}/events/99.json").status_code == 404


def test_the_evidence_report_cuts_a_long_payload_and_names_where_the_rest_is():
    lines = [{"seq": s, "ts": "2026-01-01T00:00:00Z", "type": "user_message", "payload": {"content": "r" * SIZE}, "hash": "ab" * 32} for s in range(1, 11)]
    html = report_html(manifest={"run_id": "run-r"}, lines=lines, access=[], result="verified")
    assert len(html) < 10 * (SHOWN_CHARS + 1000)
    assert "the whole of it is seq 4 in events.jsonl" in html
