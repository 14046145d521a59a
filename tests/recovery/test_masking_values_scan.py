"""A run's sensitive values are found however the stored text spells their key.

``run_sensitive_values`` asks the database for the events whose stored text could name a sensitive
field and decodes only those. These tests write a key plainly, inside JSON kept as text, and with a
``\\u`` escape straight into the table (as a log written by another tool may hold it), and expect
each value found; an event that merely quotes a value elsewhere is masked by it.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.db import connection

from recovery.masking import run_sensitive_values, value_mask
from runs.leases import lease_acquire
from runs.store import NewEvent, events_append

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True, params=["in pieces", "one statement"])
def read_path(request, monkeypatch):
    """Each test twice: a long read, one event's seq a statement, and a short one, every range in
    one statement; both must find the same values."""
    from recovery import masking

    monkeypatch.setattr(masking, "CHUNK", 1 if request.param == "in pieces" else 10_000)
    masking._RUN_VALUES.clear()
    return request.param


FIELDS = frozenset({"account"})


def _run(run_id: str) -> int:
    lease = lease_acquire(run_id=run_id, holder="w", ttl_seconds=60)
    events = [
        NewEvent("run_started", {"run_id": run_id}),
        NewEvent("user_message", {"content": "please correct 4020-7777-PLAIN for Q3"}),  # quotes it, names no key
        NewEvent("tool_call_started", {"call_id": "c1", "name": "post_correction", "arguments": {"account": "4020-7777-PLAIN", "amount": "840.00"}}),
        NewEvent("tool_call_completed", {"call_id": "c1", "name": "post_correction", "content": {"raw": '{"account": "6060-INSIDE-TEXT"}'}}),
    ]
    for i, ev in enumerate(events):
        events_append(run_id=run_id, epoch=lease.epoch, expected_seq=i, events=[ev])
    return len(events)


def test_values_under_a_plain_key_and_inside_json_text_are_found_and_mask_quotes_elsewhere():
    _run("mask-scan-1")
    values = run_sensitive_values(run_ids=["mask-scan-1"], fields=FIELDS)
    assert values == {"4020-7777-PLAIN", "6060-INSIDE-TEXT"}
    assert value_mask({"content": "please correct 4020-7777-PLAIN for Q3"}, FIELDS, values) == {"content": "please correct [masked] for Q3"}


def test_a_key_written_with_an_escape_in_the_stored_text_is_found():
    last = _run("mask-scan-2")
    assert run_sensitive_values(run_ids=["mask-scan-2"], fields=FIELDS) == {"4020-7777-PLAIN", "6060-INSIDE-TEXT"}
    # Text no encoder of Reckon's writes, but a JSON reader reads as the key "account".
    text = '{"call_id": "c2", "name": "post_correction", "arguments": {"\\u0061ccount": "9090-ESCAPED"}}'
    with connection.cursor() as c:
        c.execute(
            "INSERT INTO reckon_event (run_id, seq, type, v, ts, payload, epoch, recorded_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
            ["mask-scan-2", last + 1, "tool_call_started", 1, datetime.now(UTC), text, 1, datetime.now(UTC)],
        )
        c.execute("UPDATE reckon_run SET last_seq = %s WHERE run_id = %s", [last + 1, "mask-scan-2"])
    # The earlier read is cached up to its last seq; the new event is read on top of it.
    assert run_sensitive_values(run_ids=["mask-scan-2"], fields=FIELDS) == {"4020-7777-PLAIN", "6060-INSIDE-TEXT", "9090-ESCAPED"}


def test_several_runs_at_once_each_get_their_own_values():
    _run("mask-scan-3")
    lease = lease_acquire(run_id="mask-scan-4", holder="w", ttl_seconds=60)
    events_append(run_id="mask-scan-4", epoch=lease.epoch, expected_seq=0, events=[NewEvent("run_started", {"run_id": "mask-scan-4"})])
    events_append(run_id="mask-scan-4", epoch=lease.epoch, expected_seq=1, events=[NewEvent("user_message", {"content": "nothing sensitive"})])
    assert run_sensitive_values(run_ids=["mask-scan-3", "mask-scan-4"], fields=FIELDS) == {"4020-7777-PLAIN", "6060-INSIDE-TEXT"}
    assert run_sensitive_values(run_ids=["mask-scan-4"], fields=FIELDS) == frozenset()
