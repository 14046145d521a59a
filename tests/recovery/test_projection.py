"""The uncertain-call projection: rebuilt from the log it equals what the incremental path built."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recovery.detection import uncertain_calls_detect
from recovery.models import InFlightCall, UncertainCall
from recovery.policy_changes import policies_load
from recovery.rebuild import projections_rebuild
from recovery.reconcile import call_reconcile
from recovery.selectors import uncertain_call_get
from reckon_client.identity import call_key
from runs.importer import paths_import
from runs.leases import lease_acquire, lease_release
from runs.store import NewEvent, events_append
from tests.recovery.helpers import correction, crashed_run
from tests.recovery.helpers import snapshot

pytestmark = pytest.mark.django_db

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def test_rebuild_equals_incremental_on_the_fixtures(policies):
    ledger = policies
    policies_load(text=(FIXTURES / "policies-demo.toml").read_text(), by="dana.oncall")
    results = paths_import([str(FIXTURES / "events" / "v1")])
    assert [r.outcome for r in results] == ["imported"] * 4
    assert uncertain_calls_detect()["marked"] == 1  # C-771: imported with no live owner
    (row,) = UncertainCall.objects.all()
    assert (row.run_id, row.tool, row.uncertain_reason) == ("run-q3-recon", "post_correction", "imported from a file with no live owner")
    call_reconcile(pk=row.pk)
    crashed_run("run-extra", [("c1", "post_correction", correction()), ("c2", "read_ledger", {"tenant": "acme", "account": "1"})], completed=0)
    ledger.seed(call_key("run-extra", "post_correction", correction()), correction())
    for pk in UncertainCall.objects.filter(run_id="run-extra").values_list("pk", flat=True):
        call_reconcile(pk=pk)
    incremental = snapshot()
    assert len(incremental) == 3

    projections_rebuild()

    assert snapshot() == incremental


def test_a_start_completed_by_its_live_writer_leaves_no_row():
    lease = lease_acquire(run_id="run-live", holder="agent")
    args = {"tenant": "acme", "account": "4010"}
    key = call_key("run-live", "read_ledger", args)
    events_append(run_id="run-live", epoch=lease.epoch, expected_seq=0, events=[NewEvent("run_started", {"run_id": "run-live"}), NewEvent("tool_call_started", {"call_id": "c1", "name": "read_ledger", "arguments": args, "idempotency_key": key})])
    # In flight, and nothing else happened to it: the narrow table holds it, the queue table does not.
    assert uncertain_call_get(pk=InFlightCall.objects.get().id).state == UncertainCall.State.IN_FLIGHT
    assert not UncertainCall.objects.exists()
    # The writer's lease is live: detection leaves it alone.
    assert uncertain_calls_detect()["marked"] == 0
    events_append(run_id="run-live", epoch=lease.epoch, expected_seq=2, events=[NewEvent("tool_call_completed", {"call_id": "c1", "name": "read_ledger", "content": "1", "is_error": False, "idempotency_key": key})])
    assert not UncertainCall.objects.exists() and not InFlightCall.objects.exists()


def test_a_start_done_again_by_the_resumed_run_is_flagged_a_possible_duplicate_and_ranks_first(db):
    from recovery.selectors import uncertain_calls_filter

    older = crashed_run("run-old", [("c0", "read_ledger", {"tenant": "acme", "account": "1"})])[0]
    (call,) = crashed_run("run-dup", [("call_03", "post_correction", correction())])
    assert not call.possible_duplicate
    # The resumed run (a later epoch) asks the model again, which proposes the same correction.
    lease = lease_acquire(run_id="run-dup", holder="agent-7:worker-b")
    key = call.idempotency_key
    events_append(
        run_id="run-dup",
        epoch=lease.epoch,
        expected_seq=lease.last_seq,
        events=[
            NewEvent("tool_call_started", {"call_id": "call_09", "name": "post_correction", "arguments": correction(), "idempotency_key": key}),
            NewEvent("tool_call_completed", {"call_id": "call_09", "name": "post_correction", "content": {"id": "C-771"}, "is_error": False, "idempotency_key": key}),
        ],
    )
    call.refresh_from_db()
    assert call.possible_duplicate and call.state == UncertainCall.State.OPEN
    assert UncertainCall.objects.filter(run_id="run-dup").count() == 1  # the redo completed live: no row
    page = uncertain_calls_filter()
    assert [r.pk for r in page.items] == [call.pk, older.pk]
    before = snapshot()
    projections_rebuild()
    assert snapshot() == before


def test_the_queue_pages_by_keyset_in_the_same_order(db):
    calls = crashed_run("run-page", [(f"c{i}", "post_correction", correction(ref=f"C-{i}", account=str(i))) for i in range(7)])
    from recovery.selectors import uncertain_calls_filter

    seen, after = [], None
    while True:
        page = uncertain_calls_filter(after=after, limit=3)
        seen.extend(r.pk for r in page.items)
        if page.next_cursor is None:
            break
        after = page.next_cursor
    assert seen == [c.pk for c in calls]
    assert [r.pk for r in uncertain_calls_filter(limit=50).items] == seen


_runs = itertools.count()
TOOLS = ["post_correction", "read_ledger", "unknown_tool"]


@st.composite
def histories(draw):
    """A run's history after a crash: starts, completions (live, error, by call id or by key, or by
    call id with another start's key),
    detection, attempts, escalations, notes, resolutions and redos, in any order the store allows."""
    ops = draw(
        st.lists(
            st.tuples(
                st.sampled_from(["start", "complete", "fail", "complete_by_key", "complete_other_key", "uncertain", "attempt", "escalate", "note", "claim", "resolve", "redo"]),
                st.integers(0, 3),
                st.sampled_from(TOOLS),
            ),
            min_size=1,
            max_size=18,
        )
    )
    return ops


def _build(run_id: str, ops) -> list[NewEvent]:
    events = [NewEvent("run_started", {"run_id": run_id})]
    starts: list[tuple[str, str, dict, str, int]] = []
    seq = 1
    for op, i, tool in ops:
        args = {"tenant": "acme", "n": i}
        key = call_key(run_id, tool, args)
        target = starts[i % len(starts)] if starts else None
        if op == "start" or op == "redo" or target is None:
            cid = f"c{len(starts)}" if op != "redo" or target is None else f"redo{seq}"
            if op == "redo" and target is not None:
                tool, args, key = target[1], target[2], target[3]
            events.append(NewEvent("tool_call_started", {"call_id": cid, "name": tool, "arguments": args, "idempotency_key": key}))
            seq += 1
            starts.append((cid, tool, args, key, seq))
            if op == "redo":
                events.append(NewEvent("tool_call_completed", {"call_id": cid, "name": tool, "content": "again", "is_error": False, "idempotency_key": key}))
                seq += 1
            continue
        cid, tool, args, key, sseq = target
        about = {"call_id": cid, "idempotency_key": key, "start_seq": sseq}
        if op == "complete":
            ev = NewEvent("tool_call_completed", {"call_id": cid, "name": tool, "content": "ok", "is_error": False, "idempotency_key": key})
        elif op == "fail":
            ev = NewEvent("tool_call_completed", {"call_id": cid, "name": tool, "content": "declined", "is_error": True, "idempotency_key": None})
        elif op == "complete_other_key":
            # Paired with this call by call id, but recording another start's key (docs/recovery.md).
            other_key = starts[(i + 1) % len(starts)][3]
            ev = NewEvent("tool_call_completed", {"call_id": cid, "name": tool, "content": "ok", "is_error": False, "idempotency_key": other_key})
        elif op == "complete_by_key":
            ev = NewEvent("tool_call_completed", {"call_id": "other", "name": tool, "content": "ok", "is_error": False, "idempotency_key": key, "source": "reconciliation"})
        elif op == "uncertain":
            ev = NewEvent("tool_call_uncertain", {**about, "reason": "lease expired"})
        elif op == "attempt":
            ev = NewEvent("reconciliation_attempted", {**about, "attempt": i + 1, "outcome": "unavailable", "error": "503", "rule": "r", "next_attempt_in_s": 10 * i})
        elif op == "escalate":
            ev = NewEvent("approval_requested", {**about, "question": "?", "reason": "policy"})
        elif op == "note":
            ev = NewEvent("operator_note", {**about, "by": "dana.oncall", "text": "looking", "action": "note"})
        elif op == "claim":
            ev = NewEvent("operator_note", {**about, "by": "dana.oncall", "text": "mine", "action": "claim"})
        else:
            ev = NewEvent("tool_call_resolved", {**about, "disposition": ["completed", "retried", "not_happened", "compensated"][i]})
        events.append(ev)
        seq += 1
    return events


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(ops=histories(), split=st.integers(1, 6))
def test_rebuild_equals_incremental_on_generated_logs(ops, split, db):
    run_id = f"run-gen-{next(_runs)}"
    events = _build(run_id, ops)
    lease = lease_acquire(run_id=run_id, holder="agent")
    # Appended in several batches, as a live run would, so the incremental path sees partial logs.
    done = 0
    for chunk in range(0, len(events), split):
        batch = events[chunk : chunk + split]
        events_append(run_id=run_id, epoch=lease.epoch, expected_seq=done, events=batch)
        done += len(batch)
    lease_release(run_id=run_id, epoch=lease.epoch)
    incremental = snapshot()
    projections_rebuild()
    assert snapshot() == incremental


def test_the_projections_rule_table_names_every_event_type_once():
    from recovery import projection
    from runs.events import EventType, RegistryIncomplete, rule_table

    assert projection.RELEVANT == frozenset(projection.HANDLERS) and "operator_note" in projection.RELEVANT
    handlers = {EventType(t): f for t, f in projection.HANDLERS.items()}
    ignored = set(EventType) - set(handlers)
    # A new type with no decision, or a type both handled and ignored, stops the import.
    with pytest.raises(RegistryIncomplete, match="operator_note"):
        rule_table("projection", {t: f for t, f in handlers.items() if t != EventType.OPERATOR_NOTE}, ignored=ignored)
    with pytest.raises(RegistryIncomplete, match="both handled and ignored: \\['run_started'\\]"):
        rule_table("projection", {**handlers, EventType.RUN_STARTED: handlers[EventType.OPERATOR_NOTE]}, ignored=ignored)


def test_an_escalation_reads_only_its_calls_row_and_a_resolution_still_closes_every_start_of_its_action():
    """Events that name their start (an escalation here) change that start's row alone, so the
    projection reads only it; a resolution may close other starts of the same action, so it reads
    them all. Both end as a rebuild from the log ends."""
    from runs.leases import lease_acquire as acquire

    # Two starts of the same action (same arguments, so the same key) and one other call, all left in doubt.
    rows = crashed_run("run-many", [("a", "post_correction", correction()), ("b", "post_correction", correction()), ("c", "read_ledger", {"tenant": "acme", "account": "1"})])
    a, b, c = rows
    assert a.idempotency_key == b.idempotency_key != c.idempotency_key
    lease = acquire(run_id="run-many", holder="operator-console", ttl_seconds=300)
    seq = max(r.last_seq for r in rows)
    about = {"call_id": "a", "idempotency_key": a.idempotency_key, "start_seq": a.start_seq}
    events_append(run_id="run-many", epoch=lease.epoch, expected_seq=seq, events=[NewEvent("approval_requested", {**about, "question": "did it happen?", "reason": "conflict"})])
    by_call = {r.call_id: r for r in UncertainCall.objects.filter(run_id="run-many")}
    assert (by_call["a"].state, by_call["b"].state, by_call["c"].state) == (UncertainCall.State.ESCALATED, UncertainCall.State.OPEN, UncertainCall.State.OPEN)
    assert (by_call["b"].version, by_call["c"].version) == (b.version, c.version)  # untouched
    resolved = {**about, "disposition": "completed", "by": "dana.oncall"}
    events_append(run_id="run-many", epoch=lease.epoch, expected_seq=seq + 1, events=[NewEvent("tool_call_resolved", resolved)])
    states = dict(UncertainCall.objects.filter(run_id="run-many").values_list("call_id", "state"))
    assert states == {"a": "resolved", "b": "resolved", "c": "open"}
    incremental = snapshot()
    projections_rebuild()
    assert snapshot() == incremental


def test_no_upcaster_changes_what_a_pair_completed_at_once_is_decided_on():
    # The incremental projection decides such a pair on the payloads as stored (rows_apply's
    # ``upcast``), so every upcaster must leave these fields as that decision reads them.
    from recovery.projection import PAIR_FIELDS
    from runs.fold import Event
    from runs.upcasters import UPCASTERS, event_upcast

    start = {"call_id": "c1", "name": "read_ledger", "arguments": {"account": "4001"}, "signature": 'read_ledger:{"account":"4001"}'}
    done = {"call_id": "c1", "name": "read_ledger", "content": {"ok": True}}
    variants = [{}, {"idempotency_key": "k1"}, {"retry_of": 3}, {"is_error": True}, {"source": "retry"}, {"idempotency_key": None, "is_error": False}]
    checked = set()
    for (type_, v), _ in UPCASTERS.items():
        base = start if type_ == "tool_call_started" else done
        for extra in variants:
            payload = {**base, **extra}
            upcast = event_upcast(Event(4, type_, payload, None, v), "run-x").payload
            for field in PAIR_FIELDS:
                default = "live" if field == "source" else None
                assert upcast.get(field, default) == payload.get(field, default), (type_, v, field, extra)
        checked.add((type_, v))
    assert checked == set(UPCASTERS)


def test_a_question_about_a_settled_call_leaves_it_settled_and_not_decidable(db):
    # An agent's token may append an approval request naming any start of its run. One about a
    # call already resolved must not show it in doubt again (escalated, yet with its resolution
    # time): a person could then decide it, and a retry carry it out, a second time.
    run_id = "run-settled-asked"
    call = crashed_run(run_id, [("c1", "post_correction", correction())])[0]
    lease = lease_acquire(run_id=run_id, holder="agent")
    about = {"call_id": "c1", "idempotency_key": call.idempotency_key, "start_seq": call.start_seq}
    last = call.last_seq
    events_append(run_id=run_id, epoch=lease.epoch, expected_seq=last, events=[NewEvent("tool_call_resolved", {**about, "disposition": "not_happened", "by": "dana.oncall"})])
    settled = UncertainCall.objects.get(pk=call.pk)
    assert settled.state == UncertainCall.State.RESOLVED and settled.resolved_at is not None
    events_append(run_id=run_id, epoch=lease.epoch, expected_seq=last + 1, events=[NewEvent("approval_requested", {**about, "question": "did it happen?", "reason": "policy"})])
    lease_release(run_id=run_id, epoch=lease.epoch)
    after = UncertainCall.objects.get(pk=call.pk)
    assert (after.state, after.resolved_at, after.disposition, after.approval_pending) == (UncertainCall.State.RESOLVED, settled.resolved_at, "not_happened", False)
    assert after.decidable() is not None  # refused: a decision on it is not offered
    incremental = snapshot()
    projections_rebuild()
    assert snapshot() == incremental
