"""The race, with real connections: two writers start from the same prefix and are released together
by a barrier. Exactly one append wins each round; seqs stay unique and contiguous; at most one
run_finished is ever durable. PostgreSQL only: that is where writers truly run concurrently."""

import threading

import pytest
from django.db import connection, connections

from runs.errors import FenceError, LeaseHeld
from runs.leases import db_now, lease_acquire
from runs.models import Event, Run
from runs.store import NewEvent, events_append

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

ROUNDS = 200


def _race(n, work):
    """Run ``work(i)`` in n threads released together; return their results (value or exception)."""
    barrier = threading.Barrier(n)
    results = [None] * n

    def run(i):
        try:
            barrier.wait(timeout=10)
            results[i] = work(i)
        except Exception as exc:  # the loser's refusal is a result, not a failure
            results[i] = exc
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    return results


def test_two_writers_from_the_same_prefix_one_wins_every_round():
    run_id = "race-run"
    lease = lease_acquire(run_id=run_id, holder="supervisor")
    events_append(run_id=run_id, epoch=lease.epoch, expected_seq=0, events=[NewEvent("run_started", {"run_id": run_id})])
    for rnd in range(ROUNDS):
        prefix = Run.objects.get(run_id=run_id).last_seq
        last_round = rnd == ROUNDS - 1

        def write(i, prefix=prefix, last_round=last_round):
            batch = [NewEvent("model_turn", {"text": f"round {rnd} writer {i}"})]
            if last_round:
                batch.append(NewEvent("run_finished", {"outcome": f"writer {i}"}))
            return events_append(run_id=run_id, epoch=lease.epoch, expected_seq=prefix, events=batch)

        results = _race(2, write)
        wins = [r for r in results if isinstance(r, list)]
        losses = [r for r in results if isinstance(r, FenceError)]
        assert len(wins) == 1 and len(losses) == 1, f"round {rnd}: {results!r}"
    seqs = list(Event.objects.filter(run_id=run_id).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1)) and len(seqs) == 1 + ROUNDS + 1
    assert Event.objects.filter(run_id=run_id, type="run_finished").count() == 1


def test_two_resuming_workers_racing_for_a_finished_runs_terminal_outcome_leave_one():
    """Each round: a fresh run; both writers append [model_turn, run_finished] from the same prefix."""
    for rnd in range(ROUNDS // 4):
        run_id = f"race-finish-{rnd}"
        lease = lease_acquire(run_id=run_id, holder="supervisor")
        events_append(run_id=run_id, epoch=lease.epoch, expected_seq=0, events=[NewEvent("run_started", {"run_id": run_id})])
        results = _race(
            2,
            lambda i: events_append(
                run_id=run_id,
                epoch=lease.epoch,
                expected_seq=1,
                events=[NewEvent("model_turn", {"text": f"w{i}"}), NewEvent("run_finished", {"outcome": f"w{i}"})],
            ),
        )
        assert sum(isinstance(r, list) for r in results) == 1, results
        assert Event.objects.filter(run_id=run_id, type="run_finished").count() == 1


def test_two_workers_taking_over_an_expired_lease_one_gets_the_next_epoch_one_is_fenced():
    for rnd in range(ROUNDS // 4):
        run_id = f"race-takeover-{rnd}"
        dead = lease_acquire(run_id=run_id, holder="dead-worker")
        events_append(run_id=run_id, epoch=dead.epoch, expected_seq=0, events=[NewEvent("run_started", {"run_id": run_id})])
        Run.objects.filter(run_id=run_id).update(lease_expires_at=db_now())

        def take_over_and_append(i):
            lease = lease_acquire(run_id=run_id, holder=f"worker-{i}")
            return events_append(run_id=run_id, epoch=lease.epoch, expected_seq=1, events=[NewEvent("run_resumed", {"epoch": lease.epoch, "holder": f"worker-{i}", "after_seq": 1})])

        results = _race(2, take_over_and_append)
        assert sum(isinstance(r, list) for r in results) == 1, results
        assert sum(isinstance(r, LeaseHeld) for r in results) == 1, results
        assert Run.objects.get(run_id=run_id).lease_epoch == dead.epoch + 1
        # The dead worker wakes up and tries to append: fenced.
        with pytest.raises(FenceError):
            events_append(run_id=run_id, epoch=dead.epoch, expected_seq=2, events=[NewEvent("run_finished", {"outcome": "zombie"})])
        assert list(Event.objects.filter(run_id=run_id).order_by("seq").values_list("seq", flat=True)) == [1, 2]
    assert connection.vendor == "postgresql"
