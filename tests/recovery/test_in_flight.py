"""Calls in flight: the narrow table the agent's hot path writes, and the queue row detection makes.

A tool call's start is kept as an ``InFlightCall`` (run, seq, key, epoch...) written in the start's
own append; its live completion deletes it in the completion's own append. Only a call that became
uncertain (or that anything else happened to) gets a full ``UncertainCall`` row, with the same id.
"""

from __future__ import annotations

import pytest

from recovery.detection import uncertain_calls_detect
from recovery.models import InFlightCall, UncertainCall
from recovery.rebuild import projections_rebuild
from recovery.selectors import uncertain_call_get, uncertain_calls_filter
from reckon_client import ToolCall, open_run
from runs.client import StoreTransport
from runs.leases import lease_acquire
from runs.models import Run
from runs.store import NewEvent, events_append

pytestmark = pytest.mark.django_db

S = UncertainCall.State


def _instant(arguments, *, idempotency_key):
    return {"ok": True}


def _start(run, call: ToolCall) -> int:
    key = run.key_for(call)
    return run.append("tool_call_started", call_id=call.id, name=call.name, arguments=call.arguments, idempotency_key=key, signature=call.signature()).seq


def test_a_completed_call_leaves_nothing_behind_in_any_queue_table():
    run = open_run("run-hot", transport=StoreTransport(), ttl=300, renew=False)
    for i in range(5):
        run.invoke(ToolCall(f"c{i}", "post_note", {"tenant": "acme", "n": i}), _instant)
    assert not InFlightCall.objects.exists()
    assert not UncertainCall.objects.exists()
    run.close()


def test_a_start_left_open_by_a_writer_whose_lease_ended_is_in_the_queue_after_detection():
    run = open_run("run-abandoned", transport=StoreTransport(), ttl=300, renew=False)
    run.invoke(ToolCall("c0", "post_note", {"tenant": "acme", "n": 0}), _instant)
    start_seq = _start(run, ToolCall("c1", "post_correction", {"tenant": "acme", "amount": "840.00"}))
    # In flight: the narrow table holds it, the queue does not, the console lists it as in flight.
    (flying,) = InFlightCall.objects.all()
    assert (flying.run_id, flying.start_seq, flying.call_id) == ("run-abandoned", start_seq, "c1")
    assert not UncertainCall.objects.exists()
    assert [r.pk for r in uncertain_calls_filter(state="in_flight").items] == [flying.id]
    assert uncertain_call_get(pk=flying.id).decidable() is not None
    assert uncertain_calls_filter().items == []
    assert uncertain_calls_detect()["marked"] == 0  # the writer's lease is live
    # The writer's lease ends with the start still open (a crash: it never releases, it expires).
    Run.objects.filter(run_id="run-abandoned").update(lease_expires_at="2000-01-01T00:00:00Z")
    assert uncertain_calls_detect()["marked"] == 1

    (row,) = UncertainCall.objects.all()
    assert (row.pk, row.run_id, row.start_seq, row.state, row.tool) == (flying.id, "run-abandoned", start_seq, S.OPEN, "post_correction")
    assert "expired" in row.uncertain_reason
    assert not InFlightCall.objects.exists()
    assert [r.pk for r in uncertain_calls_filter().items] == [row.pk]


def test_a_completion_that_flags_another_start_in_flight_takes_the_general_path():
    """Two starts of the same action in flight; the second completes: the first may now have
    happened twice, so it is flagged, which makes it a full row (the one-statement form refuses)."""
    lease = lease_acquire(run_id="run-twice", holder="agent", ttl_seconds=300)
    events_append(run_id="run-twice", epoch=lease.epoch, expected_seq=0, events=[NewEvent("run_started", {"run_id": "run-twice"})])
    start = {"name": "post_correction", "arguments": {"tenant": "acme", "amount": "1"}, "idempotency_key": "k-same"}
    events_append(run_id="run-twice", epoch=lease.epoch, expected_seq=1, events=[NewEvent("tool_call_started", {**start, "call_id": "a"})])
    events_append(run_id="run-twice", epoch=lease.epoch, expected_seq=2, events=[NewEvent("tool_call_started", {**start, "call_id": "b"})])
    assert InFlightCall.objects.count() == 2
    first_id = InFlightCall.objects.get(call_id="a").id
    done = {"call_id": "b", "name": "post_correction", "content": "ok", "is_error": False, "idempotency_key": "k-same"}
    events_append(run_id="run-twice", epoch=lease.epoch, expected_seq=3, events=[NewEvent("tool_call_completed", done)])
    assert not InFlightCall.objects.exists()
    (row,) = UncertainCall.objects.all()
    assert (row.pk, row.call_id, row.state, row.possible_duplicate) == (first_id, "a", S.IN_FLIGHT, True)


def _tables() -> tuple[list, list]:
    full = sorted((r.run_id, r.start_seq, r.state, r.possible_duplicate, r.version, r.last_seq) for r in UncertainCall.objects.all())
    narrow = sorted((r.run_id, r.start_seq, r.call_id, r.idempotency_key, r.tool, r.tenant, r.started_at, r.start_epoch) for r in InFlightCall.objects.all())
    return full, narrow


def test_rebuild_puts_calls_in_flight_back_in_the_narrow_table():
    run = open_run("run-rebuild", transport=StoreTransport(), ttl=300, renew=False)
    run.invoke(ToolCall("c0", "post_note", {"n": 0}), _instant)
    _start(run, ToolCall("c1", "post_note", {"n": 1}))
    _start(run, ToolCall("c2", "post_note", {"n": 2}))
    before = _tables()
    assert before[0] == [] and len(before[1]) == 2
    projections_rebuild()
    assert _tables() == before


@pytest.mark.skipif("not __import__('django.db').db.connection.vendor == 'postgresql'")
def test_a_start_and_its_completion_are_one_round_trip_each_on_postgresql():
    from runs.pg import round_trips_count

    run = open_run("run-trips", transport=StoreTransport(), ttl=300, renew=False)
    run.invoke(ToolCall("warm", "post_note", {"n": -1}), _instant)  # statements prepared
    call = ToolCall("c1", "post_note", {"n": 1})
    assert round_trips_count(lambda: run.invoke(call, _instant)) == 2
    assert not InFlightCall.objects.exists() and not UncertainCall.objects.exists()


def test_a_start_that_records_no_key_is_held_in_flight_under_the_key_the_fold_computes_from_the_runs_secret():
    # A writer other than the client may leave the key out; on a v3 run the key is then derived from
    # the run's secret, in the one-statement start (PostgreSQL) as in the general path and the fold.
    from reckon_client.identity import idempotency_key, signature
    from runs.selectors import run_key_secret, run_state

    lease = lease_acquire(run_id="run-keyless", holder="agent", ttl_seconds=300)
    events_append(run_id="run-keyless", epoch=lease.epoch, expected_seq=0, events=[NewEvent("run_started", {"run_id": "run-keyless"})])
    args = {"tenant": "acme", "account": "4020"}
    events_append(run_id="run-keyless", epoch=lease.epoch, expected_seq=1, events=[NewEvent("tool_call_started", {"call_id": "c1", "name": "post_correction", "arguments": args})])
    secret = run_key_secret(run_id="run-keyless")
    assert secret
    (held,) = InFlightCall.objects.filter(run_id="run-keyless")
    (open_call,) = run_state(run_id="run-keyless").open_calls.values()
    assert held.idempotency_key == open_call.idempotency_key == idempotency_key("run-keyless", signature("post_correction", args), secret)


def test_starts_that_share_a_call_id_are_closed_earliest_first_as_the_fold_closes_them():
    """Calls in flight are kept under their call id on the run's row; a later start of the same call
    id in flight under another key. Completions of that call id close the earliest start, on every
    path (the one-statement form when it applies, the general one otherwise), as the fold does."""
    from runs.selectors import run_state

    lease = lease_acquire(run_id="run-reuse", holder="agent", ttl_seconds=300)
    seq = 0

    def append(type_, **payload) -> None:
        nonlocal seq
        events_append(run_id="run-reuse", epoch=lease.epoch, expected_seq=seq, events=[NewEvent(type_, payload)])
        seq += 1

    def held() -> list[tuple[int, str]]:
        return sorted((r.start_seq, r.idempotency_key) for r in InFlightCall.objects.filter(run_id="run-reuse"))

    def folded() -> list[tuple[int, str]]:
        return sorted((c.start_seq, c.idempotency_key) for c in run_state(run_id="run-reuse").open_calls.values())

    def start(key: str) -> None:
        append("tool_call_started", call_id="c1", name="post_note", arguments={"key": key}, idempotency_key=key)

    def complete(key: str | None) -> None:
        # A proven failure records no key: only the call id says which start it closes.
        append("tool_call_completed", call_id="c1", name="post_note", content="ok", is_error=key is None, idempotency_key=key)

    append("run_started", run_id="run-reuse")
    start("k-a")  # seq 2
    start("k-b")  # seq 3: the same call id, while seq 2 is in flight
    assert held() == folded() == [(2, "k-a"), (3, "k-b")]
    complete("k-a")  # closes seq 2, the earliest start of c1
    assert held() == folded() == [(3, "k-b")]
    start("k-c")  # seq 5: c1 again, while seq 3 is still in flight
    assert held() == folded() == [(3, "k-b"), (5, "k-c")]
    complete(None)  # closes seq 3, the earliest start of c1 left
    assert held() == folded() == [(5, "k-c")]
    complete("k-c")
    assert held() == folded() == []
    assert not UncertainCall.objects.exists()
    start("k-d")
    before = _tables()
    projections_rebuild()
    assert _tables() == before
