"""Pins the release gate (docs/schema-versions.md): snapshot plus tail is compared with the full replay on EVERY
field of the folded state. Each field of ``RunState`` (and of the ``Message`` and ``OpenCall`` it
holds) is changed in turn, taken from ``dataclasses.fields``, so a field added later is covered
without touching this file; the comparison must name it, and ``verify_snapshots`` must not call the
snapshot equal."""

from __future__ import annotations

import copy
import dataclasses
from datetime import datetime, timedelta

import pytest

from runs.fold import Event, Message, OpenCall, RunState, fold
from runs.leases import lease_acquire
from runs.models import Snapshot
from runs.selectors import run_state
from runs.snapshot_format import body_digest, state_diff, state_dumps
from runs.snapshot_verify import snapshot_verify
from runs.snapshots import snapshot_write
from runs.store import NewEvent, events_append

RUN = "run-pin-snap"

# A log that leaves every container of the state non-empty: messages of every role, usage, cost, a
# completed key, an open call, a pending approval, memory, a compaction, a resolution, a resumption.
LOG = [
    ("run_started", {"run_id": RUN}),
    ("user_message", {"content": "reconcile Q3"}),
    ("model_turn", {"text": "posting", "usage": {"input_tokens": 120, "output_tokens": 8}, "cost_usd": 0.25, "tool_calls": [{"id": "c1", "name": "post_correction", "arguments": {"n": 1}}]}),
    ("tool_call_started", {"call_id": "c1", "name": "post_correction", "arguments": {"n": 1}, "idempotency_key": "K1"}),
    ("tool_call_completed", {"call_id": "c1", "name": "post_correction", "content": {"id": "OP-1"}, "is_error": False, "idempotency_key": "K1"}),
    ("memory_written", {"key": "ledger", "value": "4020"}),
    ("context_compacted", {"summary": "posted OP-1", "kept": 2}),
    ("tool_call_started", {"call_id": "c4", "name": "read_ledger", "arguments": {"n": 4}, "idempotency_key": "K4"}),
    ("tool_call_resolved", {"idempotency_key": "K4", "disposition": "not_happened", "by": "dana.oncall"}),
    ("run_resumed", {"epoch": 2, "holder": "worker-b", "after_seq": 9}),
    ("tool_call_started", {"call_id": "c2", "name": "post_correction", "arguments": {"n": 2}, "idempotency_key": "K2"}),
    ("approval_requested", {"call_id": "c3", "question": "file the exception ticket?"}),
]


def changed(value):
    """A different value of the same shape: what a fold bug or a stale snapshot could leave."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value + 0.5
    if isinstance(value, str):
        return value + "~"
    if isinstance(value, datetime):
        return value + timedelta(seconds=1)
    if value is None:
        return "changed"
    if isinstance(value, dict):
        assert value, "extend LOG so that this field is not empty"
        return dict(list(value.items())[:-1])
    if isinstance(value, list):
        assert value, "extend LOG so that this field is not empty"
        return value[:-1]
    raise AssertionError(f"teach changed() about {type(value).__name__}")


def tampered(base: RunState, where: str, name: str) -> RunState:
    st = copy.deepcopy(base)
    if where == "state":
        setattr(st, name, changed(getattr(st, name)))
    elif where == "message":
        st.messages[-1] = dataclasses.replace(st.messages[-1], **{name: changed(getattr(st.messages[-1], name))})
    else:
        seq, call = list(st.open_calls.items())[-1]
        st.open_calls[seq] = dataclasses.replace(call, **{name: changed(getattr(call, name))})
    return st


CASES = (
    [("state", f.name, f.name) for f in dataclasses.fields(RunState)]
    + [("message", f.name, "messages") for f in dataclasses.fields(Message)]
    + [("open_call", f.name, "open_calls") for f in dataclasses.fields(OpenCall)]
)
IDS = [f"{where}.{name}" for where, name, _ in CASES]


def folded() -> RunState:
    return fold([Event(i + 1, t, p, f"2026-09-08T11:{i:02d}:00Z") for i, (t, p) in enumerate(LOG)])


def test_it_folds_a_log_that_gives_every_field_a_value_worth_changing():
    st = folded()
    for f in dataclasses.fields(RunState):
        value = getattr(st, f.name)
        if isinstance(value, (dict, list)):
            assert value, f"RunState.{f.name} is empty after LOG"
    assert st.open_calls and st.completed_calls and st.resolutions and st.pending_approvals


@pytest.mark.parametrize("where, name, reported", CASES, ids=IDS)
def test_it_reports_a_difference_in_every_field_of_the_folded_state(where, name, reported):
    base = folded()
    other = tampered(base, where, name)
    assert state_diff(base, base) == []
    assert state_diff(base, other) == [reported], f"changing {where}.{name} was not reported"
    assert state_diff(other, base) == [reported]


@pytest.mark.django_db
@pytest.mark.parametrize("where, name, reported", CASES, ids=IDS)
def test_it_never_lets_verify_snapshots_call_a_snapshot_equal_that_differs_in_any_field(where, name, reported):
    lease = lease_acquire(run_id=RUN, holder="worker-a", ttl_seconds=600)
    events_append(run_id=RUN, epoch=lease.epoch, expected_seq=0, events=[NewEvent(t, p) for t, p in LOG])
    truth = run_state(run_id=RUN)
    snap = snapshot_write(run_id=RUN, state=truth)
    assert snapshot_verify(run_id=RUN).outcome == "equal"

    # The snapshot now holds the state a buggy fold would have cached, with a valid digest.
    snap = snapshot_write(run_id=RUN, state=truth)
    body = state_dumps(tampered(truth, where, name))
    Snapshot.objects.filter(id=snap.id).update(body=body, digest=body_digest(body))

    result = snapshot_verify(run_id=RUN)
    assert result.outcome != "equal", f"verify_snapshots called a snapshot equal that differs in {where}.{name}"
    if (where, name) in {("state", "run_id"), ("state", "last_seq")}:
        return  # the snapshot's own identity checks refuse it first (a miss, then the full replay)
    assert result.outcome == "mismatch" and result.fields == [reported], result.line()


# A log that leaves every dictionary of the state with two entries or more, and values that are
# themselves objects of two keys or more: the order of both levels is what a resumed run sees (the
# calls open in log order, the keys in completion order, a result's fields as the receiver sent them).
ORDER_RUN = "run-pin-order"
ORDER_LOG = [
    ("run_started", {"run_id": ORDER_RUN}),
    ("user_message", {"content": "reconcile Q3"}),
    ("model_turn", {"text": "posting", "usage": {"input_tokens": 120, "output_tokens": 8}, "tool_calls": [{"id": "c1", "name": "post_correction", "arguments": {"n": 1, "account": "4020"}}]}),
    ("tool_call_started", {"call_id": "c1", "name": "post_correction", "arguments": {"n": 1, "account": "4020"}, "idempotency_key": "K1"}),
    ("tool_call_completed", {"call_id": "c1", "name": "post_correction", "content": {"id": "OP-1", "posted": "C-771"}, "is_error": False, "idempotency_key": "K1"}),
    ("tool_call_started", {"call_id": "c5", "name": "post_correction", "arguments": {"n": 5}, "idempotency_key": "K5"}),
    ("tool_call_completed", {"call_id": "c5", "name": "post_correction", "content": {"id": "OP-5", "posted": "C-775"}, "is_error": False, "idempotency_key": "K5"}),
    ("memory_written", {"key": "ledger", "value": {"account": "4020", "period": "2026-Q3"}}),
    ("memory_written", {"key": "desk", "value": "regulator"}),
    ("tool_call_started", {"call_id": "c4", "name": "read_ledger", "arguments": {"n": 4}, "idempotency_key": "K4"}),
    ("tool_call_resolved", {"idempotency_key": "K4", "disposition": "not_happened", "by": "dana.oncall"}),
    ("tool_call_started", {"call_id": "c6", "name": "read_ledger", "arguments": {"n": 6}, "idempotency_key": "K6"}),
    ("tool_call_resolved", {"idempotency_key": "K6", "disposition": "not_happened", "by": "dana.oncall"}),
    ("tool_call_started", {"call_id": "c2", "name": "post_correction", "arguments": {"n": 2, "account": "4020"}, "idempotency_key": "K2"}),
    ("tool_call_started", {"call_id": "c7", "name": "post_correction", "arguments": {"n": 7}, "idempotency_key": "K7"}),
    ("approval_requested", {"call_id": "c3", "question": "file the exception ticket?"}),
    ("approval_requested", {"call_id": "c8", "question": "tell the desk?"}),
]


def _reversed(d: dict) -> dict:
    return dict(reversed(list(d.items())))


def _reordered(base: RunState, where: str) -> RunState:
    """``base`` with one dictionary's entries in another order, every key and value the same."""
    st = copy.deepcopy(base)
    if where == "completed_calls.K1":
        st.completed_calls["K1"] = _reversed(st.completed_calls["K1"])
    elif where == "memory.ledger":
        st.memory["ledger"] = _reversed(st.memory["ledger"])
    elif where == "open_calls.arguments":
        seq, call = next((s, c) for s, c in st.open_calls.items() if c.call_id == "c2")
        st.open_calls[seq] = dataclasses.replace(call, arguments=_reversed(call.arguments))
    elif where == "messages.tool_calls.arguments":
        i, m = next((i, m) for i, m in enumerate(st.messages) if m.tool_calls)
        calls = [dict(c, arguments=_reversed(c["arguments"])) for c in m.tool_calls]
        st.messages[i] = dataclasses.replace(m, tool_calls=calls)
    else:
        setattr(st, where, _reversed(getattr(st, where)))
    return st


ORDER_DICT_FIELDS = [f.name for f in dataclasses.fields(RunState) if isinstance(getattr(RunState(), f.name), dict)]
ORDER_CASES = [(name, name) for name in ORDER_DICT_FIELDS] + [
    ("completed_calls.K1", "completed_calls"),
    ("memory.ledger", "memory"),
    ("open_calls.arguments", "open_calls"),
    ("messages.tool_calls.arguments", "messages"),
]


def test_the_order_log_gives_every_dictionary_of_the_state_two_entries():
    st = fold([Event(i + 1, t, p, f"2026-09-08T11:{i:02d}:00Z") for i, (t, p) in enumerate(ORDER_LOG)])
    assert set(ORDER_DICT_FIELDS) == {"usage", "completed_calls", "open_calls", "pending_approvals", "memory", "resolutions"}
    for name in ORDER_DICT_FIELDS:
        assert len(getattr(st, name)) >= 2, f"RunState.{name} has fewer than two entries after ORDER_LOG"
    for where, _ in ORDER_CASES:
        assert state_dumps(_reordered(st, where)) != state_dumps(st), where


@pytest.mark.django_db
@pytest.mark.parametrize("where, reported", ORDER_CASES, ids=[w for w, _ in ORDER_CASES])
def test_a_snapshot_whose_state_differs_only_in_the_order_of_a_dictionary_is_refused(where, reported):
    lease = lease_acquire(run_id=ORDER_RUN, holder="worker-a", ttl_seconds=600)
    events_append(run_id=ORDER_RUN, epoch=lease.epoch, expected_seq=0, events=[NewEvent(t, p) for t, p in ORDER_LOG])
    truth = run_state(run_id=ORDER_RUN)
    reordered = _reordered(truth, where)
    assert getattr(reordered, reported) == getattr(truth, reported)  # equal as Python values: only the order differs
    assert state_diff(truth, reordered) == [reported] and state_diff(reordered, truth) == [reported]

    snap = snapshot_write(run_id=ORDER_RUN, state=truth)
    body = state_dumps(reordered)
    Snapshot.objects.filter(id=snap.id).update(body=body, digest=body_digest(body))
    result = snapshot_verify(run_id=ORDER_RUN)
    assert result.outcome == "mismatch" and result.fields == [reported], result.line()
