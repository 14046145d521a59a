"""Calls reconciled in a batch share durable commits, and nothing else: each keeps its own lease,
fenced append and projection update, and one call's refusal or failure never touches another."""

from __future__ import annotations

import pytest
from django.db import connection

from recovery import ownership, reconcile
from recovery.decisions import call_note
from recovery.models import UncertainCall
from recovery.reconcile import call_reconcile, calls_reconcile
from runs.leases import lease_acquire, lease_release
from runs.models import LeaseRecord, Run
from runs.store import events_read
from tests.recovery.helpers import correction, crashed_run

pytestmark = pytest.mark.django_db

S = UncertainCall.State


def _ours(run_id: str) -> list[str]:
    return [e.type for e in events_read(run_id=run_id) if e.type in ("reconciliation_attempted", "tool_call_completed", "tool_call_resolved")]


def test_calls_of_several_runs_are_each_resolved_under_their_own_lease(policies):
    ledger = policies
    calls = [crashed_run(f"run-g{i}", [("c1", "post_correction", correction(ref=f"G-{i}"))])[0] for i in range(3)]
    for c in calls:
        ledger.seed(c.idempotency_key, correction(ref=c.arguments["reference"]))

    results = calls_reconcile([(c.pk, 1) for c in calls])

    assert [(r.status, r.action) for r in results] == [("acted", "complete")] * 3
    for c in calls:
        c.refresh_from_db()
        assert (c.state, c.disposition, c.attempts) == (S.RESOLVED, "completed", 1)
        assert _ours(c.run_id) == ["reconciliation_attempted", "tool_call_completed", "tool_call_resolved"]
        kinds = list(LeaseRecord.objects.filter(run_id=c.run_id, holder__startswith="reckon-recovery").values_list("kind", flat=True))
        assert kinds == ["acquired", "acquired"]  # detection's, then reconciliation's
        assert LeaseRecord.objects.filter(run_id=c.run_id, kind="released").count() == 3  # the agent's, then both of ours
    # A redelivered batch finds every attempt recorded and writes nothing.
    assert [r.status for r in calls_reconcile([(c.pk, 1) for c in calls])] == ["skipped"] * 3


def test_two_calls_of_one_run_in_one_batch_are_both_reconciled_in_order(policies):
    ledger = policies
    a, b = crashed_run("run-g-two", [("c1", "post_correction", correction(ref="A")), ("c2", "post_correction", correction(ref="B"))])
    ledger.seed(a.idempotency_key, correction(ref="A"))
    ledger.seed(b.idempotency_key, correction(ref="B"))

    results = calls_reconcile([(a.pk, 1), (b.pk, 1)])

    assert [r.status for r in results] == ["acted", "acted"]  # the second is not "busy" with our own lease
    assert _ours("run-g-two") == ["reconciliation_attempted", "tool_call_completed", "tool_call_resolved"] * 2
    assert set(UncertainCall.objects.filter(run_id="run-g-two").values_list("state", flat=True)) == {S.RESOLVED}


def test_a_later_call_of_the_run_sees_what_an_earlier_one_in_the_batch_settled(policies):
    ledger = policies
    # The agent started the same logical call twice: one key, two starts, both in doubt.
    first, second = crashed_run("run-g-same", [("c1", "post_correction", correction()), ("c2", "post_correction", correction())])
    assert first.idempotency_key == second.idempotency_key
    ledger.seed(first.idempotency_key, correction())

    results = calls_reconcile([(first.pk, 1), (second.pk, 1)])

    # The first resolution closes both starts of the action; the second call, read after it was
    # committed, has nothing left to do.
    assert [r.status for r in results] == ["acted", "skipped"]
    assert [e for e in _ours("run-g-same") if e == "tool_call_completed"] == ["tool_call_completed"]


def test_a_call_whose_lease_was_lost_writes_nothing_and_the_others_still_commit(policies, monkeypatch):
    ledger = policies
    lost, kept = (crashed_run(f"run-g-{n}", [("c1", "post_correction", correction(ref=n))])[0] for n in ("lost", "kept"))
    ledger.seed(lost.idempotency_key, correction(ref="lost"))
    ledger.seed(kept.idempotency_key, correction(ref="kept"))
    real = reconcile.reconcile_owned

    def then_lose_the_lease(owner, row, policy=None):
        result = real(owner, row, policy)
        if row.run_id == "run-g-lost":
            # Our lease runs out while the call waits for the group's commit; an agent takes over.
            with connection.cursor() as cur:
                cur.execute("UPDATE reckon_run SET lease_expires_at = %s WHERE run_id = %s", ["2000-01-01T00:00:00+00:00", row.run_id])
            lease_acquire(run_id=row.run_id, holder="agent-7:worker-b")
        return result

    monkeypatch.setattr(reconcile, "reconcile_owned", then_lose_the_lease)

    results = calls_reconcile([(lost.pk, 1), (kept.pk, 1)])

    assert [r.status for r in results] == ["fenced", "acted"]
    assert _ours("run-g-lost") == []
    assert _ours("run-g-kept") == ["reconciliation_attempted", "tool_call_completed", "tool_call_resolved"]
    lost.refresh_from_db()
    kept.refresh_from_db()
    assert (lost.state, lost.attempts, kept.state) == (S.OPEN, 0, S.RESOLVED)
    assert LeaseRecord.objects.filter(run_id="run-g-lost", kind="fenced").exists()


def test_a_failing_append_rolls_the_group_back_and_the_others_are_finished_alone(policies, monkeypatch):
    ledger = policies
    bad, good = (crashed_run(f"run-g-{n}", [("c1", "post_correction", correction(ref=n))])[0] for n in ("bad", "good"))
    ledger.seed(bad.idempotency_key, correction(ref="bad"))
    ledger.seed(good.idempotency_key, correction(ref="good"))
    real = ownership.Owner.flush

    def flush(self):
        if self.run_id == "run-g-bad" and self.pending:
            raise RuntimeError("disk on fire")
        return real(self)

    monkeypatch.setattr(ownership.Owner, "flush", flush)

    results = calls_reconcile([(bad.pk, 1), (good.pk, 1)])

    assert results[0].status == "error" and "disk on fire" in results[0].detail
    assert results[1].status == "acted"
    assert _ours("run-g-bad") == []
    assert _ours("run-g-good") == ["reconciliation_attempted", "tool_call_completed", "tool_call_resolved"]
    # The failed call gave its lease back: the next pass can take the run at once.
    monkeypatch.undo()
    assert call_reconcile(pk=bad.pk, attempt=1).status == "acted"


@pytest.mark.skipif(connection.vendor == "postgresql", reason="on PostgreSQL the read and the lease are one statement: the test below")
def test_a_run_that_moved_between_the_read_and_the_lease_is_read_again(policies, monkeypatch):
    ledger = policies
    (call,) = crashed_run("run-g-moved", [("c1", "post_correction", correction())])
    ledger.seed(call.idempotency_key, correction())
    real_take, real_row = reconcile.lease_take, reconcile.call_row
    reread = []

    def take(run_id):
        if not reread and run_id == "run-g-moved":
            reread.append("noted")
            monkeypatch.setattr(reconcile, "lease_take", real_take)
            call_note(pk=call.pk, by="dana.oncall", text="looking at it")  # an append after our read
            monkeypatch.setattr(reconcile, "call_row", row)
        return real_take(run_id)

    def row(pk):
        reread.append("read again")
        return real_row(pk)

    monkeypatch.setattr(reconcile, "lease_take", take)

    assert call_reconcile(pk=call.pk, attempt=1).status == "acted"
    assert reread == ["noted", "read again"]
    call.refresh_from_db()
    assert (call.state, call.notes) == (S.RESOLVED, 1)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the read and the lease in one statement are PostgreSQL's")
@pytest.mark.django_db(transaction=True)  # two connections: each must see what the other committed
def test_a_run_that_moved_while_the_read_waited_for_the_lease_is_read_again(policies, monkeypatch):
    import threading

    from django.db import connections, transaction

    ledger = policies
    (call,) = crashed_run("run-g-moved-pg", [("c1", "post_correction", correction())])
    ledger.seed(call.idempotency_key, correction())
    real_row = reconcile.call_row
    reread = []

    def row(pk):
        reread.append("read again")
        return real_row(pk)

    monkeypatch.setattr(reconcile, "call_row", row)
    noted, go, done = threading.Event(), threading.Event(), threading.Event()
    errors = []

    def person():
        # A person's note, appended under the run's lease in a transaction that stays open (and
        # holds the run row's lock) until the worker's statement has read the call and waits.
        try:
            with transaction.atomic():
                call_note(pk=call.pk, by="dana.oncall", text="looking at it")
                noted.set()
                go.wait(10)
        except Exception as exc:  # reported by the test's thread
            errors.append(exc)
        finally:
            connections.close_all()
            done.set()

    threading.Thread(target=person).start()
    assert noted.wait(10)

    def release_once_waiting():
        # The worker's statement has taken its snapshot (before the note) and waits for the lock.
        import time

        with connections["default"].cursor() as cur:
            for _ in range(500):
                cur.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE %s", ["%reckon_uncertain_call uc%"])
                if cur.fetchone()[0]:
                    break
                time.sleep(0.01)
        go.set()

    with connections["default"].cursor() as cur:
        cur.execute("SELECT 1")  # the worker's connection is open before the watcher's thread asks
    watcher = threading.Thread(target=lambda: (release_once_waiting(), connections.close_all()))
    watcher.start()

    assert call_reconcile(pk=call.pk, attempt=1).status == "acted"
    watcher.join(10)
    assert done.wait(10) and not errors
    assert reread == ["read again"]  # the lease reported a last seq the read had not seen
    call.refresh_from_db()
    assert (call.state, call.notes) == (S.RESOLVED, 1)


def test_a_group_gives_its_leases_back_in_one_go_each_recorded_in_the_order_of_its_calls(policies):
    ledger = policies
    calls = [crashed_run(f"run-g-back-{i}", [("c1", "post_correction", correction(ref=f"B-{i}"))])[0] for i in range(4)]
    for c in calls:
        ledger.seed(c.idempotency_key, correction(ref=c.arguments["reference"]))
    before = LeaseRecord.objects.order_by("-id").values_list("id", flat=True).first()

    assert [r.status for r in calls_reconcile([(c.pk, 1) for c in reversed(calls)])] == ["acted"] * 4

    released = list(LeaseRecord.objects.filter(id__gt=before, kind="released").order_by("id").values_list("run_id", "epoch"))
    assert [r for r, _ in released] == [c.run_id for c in reversed(calls)]
    for run_id, epoch in released:
        assert Run.objects.get(run_id=run_id).lease_epoch == epoch
    assert not Run.objects.filter(run_id__startswith="run-g-back-").exclude(lease_holder="").exists()


@pytest.mark.skipif(connection.vendor != "postgresql", reason="round trips and commit settings are PostgreSQL's")
@pytest.mark.django_db(transaction=True)  # as a worker runs: no test transaction around it, its commits real
def test_a_reconciled_call_costs_two_round_trips_and_its_group_six_more(policies):
    from runs.pg import round_trips_count

    ledger = policies
    every = [crashed_run(f"run-g-trips-{i}", [("c1", "post_correction", correction(ref=f"T-{i}"))])[0] for i in range(10)]
    for c in every:
        ledger.seed(c.idempotency_key, correction(ref=c.arguments["reference"]))
    warm, calls = every[:6], every[6:]
    # As in a worker that has run a while: psycopg prepares a statement after its fifth execution
    # (DATABASE_PREPARE_THRESHOLD), and the notification routes are read once.
    calls_reconcile([(c.pk, 1) for c in warm])

    trips = round_trips_count(lambda: calls_reconcile([(c.pk, 1) for c in calls]))

    # Per call: its read with its lease, its append with its row's update. Per group: BEGIN, the
    # leases given back, COMMIT, and the decision log's sensitive fields, runs and events after the
    # commit.
    assert trips == 2 * len(calls) + 6
    assert set(UncertainCall.objects.filter(run_id__startswith="run-g-trips-").values_list("state", flat=True)) == {S.RESOLVED}


@pytest.mark.skipif(connection.vendor != "postgresql", reason="synchronous_commit is PostgreSQL's")
def test_a_lease_taken_lazily_inside_a_transaction_leaves_that_transaction_durable():
    from django.db import transaction

    def setting():
        with connection.cursor() as cur:
            cur.execute("SHOW synchronous_commit")
            return cur.fetchone()[0]

    with transaction.atomic():
        lease_acquire(run_id="run-g-lazy", holder="someone", lazily=True)
        assert setting() == "on"  # the transaction may hold history: its commit waits for the flush
    assert setting() == "on"
    lease_release(run_id="run-g-lazy", epoch=1)
    lease_acquire(run_id="run-g-lazy", holder="someone", lazily=True)  # on its own: lazily, for itself only
    assert setting() == "on"


def test_a_policy_changed_between_two_calls_is_the_one_the_second_call_uses(policies):
    from recovery.policy_changes import policy_update

    ledger = policies
    first, second = (crashed_run(f"run-g-pol-{i}", [("c1", "post_correction", correction(ref=f"P-{i}"))])[0] for i in range(2))
    ledger.seed(first.idempotency_key, correction(ref="P-0"))
    ledger.seed(second.idempotency_key, correction(ref="P-1"))
    assert call_reconcile(pk=first.pk, attempt=1).action == "complete"

    # The worker keeps the policies it read by their row's values: a change is a new row value.
    policy_update(tool="post_correction", fields={"lookup": {"adapter": "http", "url": "http://127.0.0.1:9/operations/{idempotency_key}", "timeout": "200ms"}}, by="dana.oncall")

    result = call_reconcile(pk=second.pk, attempt=1)
    assert (result.action, result.outcome) == ("backoff", "unavailable")
    assert "127.0.0.1:9/operations" in UncertainCall.objects.get(pk=second.pk).last_error
