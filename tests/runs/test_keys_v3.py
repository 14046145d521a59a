"""Schema version 3 in the log: the key secret in run_started, kept exactly by import, replay and
snapshots; keys a start did not record computed from it by the fold and the projection alike; and
the refusals (a secret in an older version, a malformed one, a withheld one where the run is not)."""

from __future__ import annotations

import json

import pytest

from recovery.detection import uncertain_calls_detect
from recovery.models import UncertainCall
from runs.fold import Event as FoldEvent
from runs.fold import fold
from reckon_client.identity import idempotency_key, signature
from runs.importer import log_import
from runs.leases import lease_acquire, lease_release
from runs.models import Event
from runs.selectors import run_key_secret, run_state
from runs.snapshot_format import state_dumps, state_loads
from runs.store import NewEvent, events_append, events_load
from runs.upcasters import payload_complete
from tests.golden import FIXTURES, golden_path

pytestmark = pytest.mark.django_db

V3 = FIXTURES / "v3" / "run-v3-keyed.jsonl"
SECRET = "5f0c1e9a2b7d4c38a1e6f2d90b3c7a41"  # the fixture's
ARGS = {"tenant": "acme", "account": "4020", "amount": "840.00", "currency": "GBP", "period": "2026-Q3", "reference": "C-901"}


def _import(path, data=None):
    return log_import(str(path), data if data is not None else path.read_bytes())


def test_a_v3_log_imports_with_its_secret_kept_exactly_and_replays_to_its_golden_states():
    result = _import(V3)
    assert result.outcome == "imported", result.line()
    assert run_key_secret(run_id="run-v3-keyed") == SECRET
    assert set(Event.objects.filter(run_id="run-v3-keyed").values_list("v", flat=True)) == {3}
    golden = json.loads(golden_path(V3).read_text())
    for seq, expected in golden.items():
        assert json.loads(json.dumps(run_state(run_id="run-v3-keyed", at=int(seq)).to_dict())) == expected, seq
    assert _import(V3).outcome == "unchanged"


def test_the_fold_computes_a_key_the_start_did_not_record_from_the_secret_and_the_operation_id():
    _import(V3)
    sig = signature("post_correction", ARGS)
    at7 = run_state(run_id="run-v3-keyed", at=7)
    assert [c.idempotency_key for c in at7.uncertain_calls] == [idempotency_key("run-v3-keyed", sig, SECRET, "op-C-901")]
    final = run_state(run_id="run-v3-keyed")
    assert [c.idempotency_key for c in final.uncertain_calls] == [idempotency_key("run-v3-keyed", sig, SECRET)]
    # Neither is the secret-less formula's key, which anyone could recompute from the arguments.
    assert idempotency_key("run-v3-keyed", sig) not in {at7.uncertain_calls[0].idempotency_key, final.uncertain_calls[0].idempotency_key}
    assert "key_secret" not in json.dumps(final.to_dict()), "the replay document never carries the secret"


def test_the_projection_computes_the_same_key_as_the_fold_for_a_start_that_recorded_none():
    _import(V3)
    uncertain_calls_detect(run_id="run-v3-keyed")
    (row,) = UncertainCall.objects.filter(run_id="run-v3-keyed", call_id="call_03")
    assert row.idempotency_key == run_state(run_id="run-v3-keyed").uncertain_calls[0].idempotency_key


def test_a_snapshot_keeps_the_secret_so_a_state_from_snapshot_plus_tail_computes_the_same_keys():
    _import(V3)
    st = run_state(run_id="run-v3-keyed", at=6)
    restored = state_loads(state_dumps(st))
    assert restored.key_secret == SECRET
    tail = [e for e in events_load(run_id="run-v3-keyed") if e.seq > 6]
    assert fold(tail, restored).uncertain_calls == run_state(run_id="run-v3-keyed").uncertain_calls


def test_the_store_gives_a_new_v3_run_a_secret_and_keeps_one_the_writer_chose():
    lease = lease_acquire(run_id="run-new", holder="a")
    [ev] = events_append(run_id="run-new", epoch=lease.epoch, expected_seq=0, events=[NewEvent("run_started", {"run_id": "run-new"})])
    assert len(ev.payload["key_secret"]) == 32 and ev.payload["key_secret"] == run_key_secret(run_id="run-new")
    lease = lease_acquire(run_id="run-chosen", holder="a")
    events_append(run_id="run-chosen", epoch=lease.epoch, expected_seq=0, events=[NewEvent("run_started", {"run_id": "run-chosen", "key_secret": "ab" * 16})])
    assert run_key_secret(run_id="run-chosen") == "ab" * 16
    # Two runs never share one (16 random bytes each).
    lease = lease_acquire(run_id="run-other", holder="a")
    events_append(run_id="run-other", epoch=lease.epoch, expected_seq=0, events=[NewEvent("run_started", {"run_id": "run-other"})])
    assert run_key_secret(run_id="run-other") != run_key_secret(run_id="run-new")


def test_an_older_run_started_gets_no_secret_and_keeps_the_old_formula():
    lease = lease_acquire(run_id="run-v2", holder="a")
    events_append(
        run_id="run-v2",
        epoch=lease.epoch,
        expected_seq=0,
        events=[NewEvent("run_started", {"run_id": "run-v2"}, v=2), NewEvent("tool_call_started", {"call_id": "c1", "name": "ping", "arguments": {}}, v=2)],
    )
    assert run_key_secret(run_id="run-v2") is None
    assert run_state(run_id="run-v2").uncertain_calls[0].idempotency_key == idempotency_key("run-v2", "ping:{}")


@pytest.mark.parametrize(
    ("v", "secret", "reason"),
    [
        (2, "ab" * 16, "key_secret exists from schema version 3, not 2"),
        (3, "short", "key_secret must be 32 to 128 lowercase hex digits"),
        (3, 12345, "key_secret must be 32 to 128 lowercase hex digits"),
        (3, "AB" * 16, "key_secret must be 32 to 128 lowercase hex digits"),
    ],
)
def test_a_misplaced_or_malformed_secret_is_refused_by_the_store_and_the_importer(tmp_path, v, secret, reason):
    from runs.errors import InvalidEvent

    lease = lease_acquire(run_id="run-bad", holder="a")
    with pytest.raises(InvalidEvent, match=reason):
        events_append(run_id="run-bad", epoch=lease.epoch, expected_seq=0, events=[NewEvent("run_started", {"run_id": "run-bad", "key_secret": secret}, v=v)])
    lease_release(run_id="run-bad", epoch=lease.epoch)
    path = tmp_path / "run-bad-file.jsonl"
    path.write_text(json.dumps({"seq": 1, "v": v, "type": "run_started", "ts": "2026-11-30T09:00:00Z", "payload": {"run_id": "run-bad-file", "key_secret": secret}}) + "\n")
    result = _import(path)
    assert result.outcome == "rejected" and f"line 1: {reason}" in result.reason
    assert not Event.objects.filter(run_id="run-bad-file").exists()


def test_an_imported_v3_log_without_a_secret_gets_none_invented():
    lines = [
        {"seq": 1, "v": 3, "type": "run_started", "ts": "2026-11-30T09:00:00Z", "payload": {"run_id": "run-v3-bare"}},
        {"seq": 2, "v": 3, "type": "tool_call_started", "ts": "2026-11-30T09:00:03Z", "payload": {"call_id": "c1", "name": "ping", "arguments": {}}},
    ]
    data = "".join(json.dumps(x) + "\n" for x in lines).encode()
    assert _import("run-v3-bare.jsonl", data).outcome == "imported"
    assert run_key_secret(run_id="run-v3-bare") is None
    assert _import("run-v3-bare.jsonl", data).outcome == "unchanged"


def test_an_export_made_for_a_person_imports_as_unchanged_where_the_run_is_and_nowhere_else(tmp_path):
    _import(V3)
    lines = [json.loads(x) for x in V3.read_text().splitlines()]
    lines[0]["payload"]["key_secret"] = "[masked]"
    exported = "".join(json.dumps(x) + "\n" for x in lines).encode()
    assert _import("run-v3-keyed.jsonl", exported).outcome == "unchanged"
    assert run_key_secret(run_id="run-v3-keyed") == SECRET
    elsewhere = exported.replace(b"run-v3-keyed", b"run-v3-copy")
    result = _import("run-v3-copy.jsonl", elsewhere)
    assert result.outcome == "rejected" and "line 1: the run's key_secret is withheld ([masked])" in result.reason
    assert not Event.objects.filter(run_id="run-v3-copy").exists()
    # The store never takes the placeholder as a secret from a live writer.
    from runs.errors import InvalidEvent

    lease = lease_acquire(run_id="run-masked", holder="a")
    with pytest.raises(InvalidEvent, match="key_secret must be"):
        events_append(run_id="run-masked", epoch=lease.epoch, expected_seq=0, events=[NewEvent("run_started", {"run_id": "run-masked", "key_secret": "[masked]"})])


def test_a_v3_payload_never_gets_a_key_computed_without_the_secret_as_its_operation_id():
    start = payload_complete("tool_call_started", {"call_id": "c1", "name": "ping", "arguments": {"tenant": "acme"}}, "run-a")
    assert (start["tenant"], start["operation_id"]) == ("acme", None)
    failed = payload_complete("tool_call_completed", {"call_id": "c1", "name": "ping", "content": "no", "is_error": True, "idempotency_key": None, "signature": "ping:{}"}, "run-a")
    assert (failed["source"], failed["operation_id"]) == ("live", None)
    recorded = payload_complete("tool_call_started", {"call_id": "c1", "name": "ping", "arguments": {}, "idempotency_key": "k1"}, "run-a")
    assert recorded["operation_id"] == "k1"


def test_a_v2_event_reads_as_the_current_version_with_its_payload_unchanged():
    from runs.upcasters import event_upcast

    ev = FoldEvent(4, "tool_call_started", {"call_id": "c", "name": "n", "arguments": {}, "idempotency_key": "k", "tenant": "default", "operation_id": "k"}, None, 2)
    up = event_upcast(ev, "run-a")
    assert (up.v, up.payload) == (4, ev.payload)  # through version 3 and version 4, both adding nothing it lacks
