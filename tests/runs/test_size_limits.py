"""Issue 31, finding 7: an event's payload and a run's payloads together have limits
(RECKON_MAX_EVENT_BYTES, RECKON_MAX_RUN_BYTES), kept by the one append path for every writer and
every statement it sends (the single append, with and without read models, the batch, a run's
end), on both engines; the run's size is kept on its row, never counted from the log."""

import pytest
from django.db import connection

from runs.errors import EventTooLarge, RunTooLarge
from runs.leases import lease_acquire
from runs.models import Run
from runs.store import NewEvent, events_append, events_read

pytestmark = pytest.mark.django_db(transaction=True)


def started(run_id):
    lease = lease_acquire(run_id=run_id, holder="worker-a", ttl_seconds=30)
    events_append(run_id=run_id, epoch=lease.epoch, expected_seq=0, events=[NewEvent("run_started", {"run_id": run_id})])
    return lease


def text(n):
    return NewEvent("user_message", {"content": "x" * n})


def call(i, n=10):
    return NewEvent("tool_call_started", {"call_id": f"c{i}", "name": "t", "arguments": {"pad": "x" * n}, "idempotency_key": f"k{i}"})


def stored_bytes(run_id):
    with connection.cursor() as cur:
        if connection.vendor == "postgresql":
            cur.execute("SELECT COALESCE(sum(octet_length(payload::text)), 0) FROM reckon_event WHERE run_id = %s", [run_id])
        else:
            cur.execute("SELECT COALESCE(sum(length(CAST(payload AS BLOB))), 0) FROM reckon_event WHERE run_id = %s", [run_id])
        return cur.fetchone()[0]


@pytest.fixture
def small(settings):
    settings.RECKON_MAX_EVENT_BYTES = 2000
    settings.RECKON_MAX_RUN_BYTES = 10_000
    return settings


@pytest.mark.parametrize("batch", [1, 3], ids=["single", "batch"])
def test_an_event_over_the_limit_is_refused_naming_the_limit_and_nothing_is_written(small, batch):
    lease = started("big-ev")
    events = [text(10)] * (batch - 1) + [text(2500)]
    with pytest.raises(EventTooLarge) as exc:
        events_append(run_id="big-ev", epoch=lease.epoch, expected_seq=1, events=events)
    assert "RECKON_MAX_EVENT_BYTES" in str(exc.value) and "2,000" in str(exc.value)
    assert exc.value.seq == 1 + batch and exc.value.limit == 2000
    assert [e.seq for e in events_read(run_id="big-ev")] == [1]
    assert Run.objects.get(run_id="big-ev").payload_bytes == stored_bytes("big-ev")


def test_an_event_at_the_limit_is_accepted(small):
    lease = started("at-limit")
    body = len('{"content":""}')
    events_append(run_id="at-limit", epoch=lease.epoch, expected_seq=1, events=[text(2000 - body)])
    assert Run.objects.get(run_id="at-limit").payload_bytes == stored_bytes("at-limit")


@pytest.mark.parametrize(
    "make",
    [
        lambda i: [text(1500)],  # the plain single append
        lambda i: [call(i, 1400)],  # a single append with its read models in the statement
        lambda i: [text(700), text(700)],  # a batch
    ],
    ids=["single", "projected", "batch"],
)
def test_a_run_is_refused_once_its_payloads_would_pass_the_run_limit(small, make):
    lease = started("big-run")
    seq, i = 1, 0
    with pytest.raises(RunTooLarge) as exc:
        while True:
            events = make(i)
            events_append(run_id="big-run", epoch=lease.epoch, expected_seq=seq, events=events)
            seq += len(events)
            i += 1
            assert i < 20, "the run limit was never reached"
    run = Run.objects.get(run_id="big-run")
    assert run.last_seq == seq and run.payload_bytes == stored_bytes("big-run") <= 10_000
    assert "RECKON_MAX_RUN_BYTES" in str(exc.value) and "10,000" in str(exc.value)
    # The first event of the refused batch that does not fit: an imported log's line.
    assert seq < exc.value.seq <= seq + len(make(0)) and exc.value.setting == "RECKON_MAX_RUN_BYTES"
    assert [e.seq for e in events_read(run_id="big-run")][-1] == seq  # nothing half written
    # A small event still fits when the sum allows it: the limit is the sum, not a closed run.
    events_append(run_id="big-run", epoch=lease.epoch, expected_seq=seq, events=[NewEvent("user_message", {"content": ""})])


def test_a_runs_end_is_refused_too_when_it_would_pass_the_run_limit(small):
    lease = started("big-end")
    seq = 1
    for _ in range(6):
        events_append(run_id="big-end", epoch=lease.epoch, expected_seq=seq, events=[text(1500)])
        seq += 1
    with pytest.raises(RunTooLarge):
        events_append(run_id="big-end", epoch=lease.epoch, expected_seq=seq, events=[NewEvent("run_finished", {"outcome": "x" * 1900})])
    assert Run.objects.get(run_id="big-end").finished_seq is None


def test_no_run_limit_when_it_is_zero(settings):
    settings.RECKON_MAX_EVENT_BYTES = 2000
    settings.RECKON_MAX_RUN_BYTES = 0
    lease = started("no-limit")
    for seq in range(1, 30):
        events_append(run_id="no-limit", epoch=lease.epoch, expected_seq=seq, events=[text(1900)])
    assert Run.objects.get(run_id="no-limit").payload_bytes == stored_bytes("no-limit") > 50_000
