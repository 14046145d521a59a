"""Deploy v3 over v1 and v2 data: logs written by the reference format (schema version 1) and by
version 2 are read by this release as version 3, while the stored rows keep the version they were written with; a version newer
than the reader knows is refused with its run, seq and version named, at import and in storage."""

import json

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from runs.events import CURRENT_SCHEMA_VERSION
from runs.fold import Event as FoldEvent
from reckon_client.identity import call_key
from runs.importer import log_import
from runs.models import Event, Run
from runs.selectors import run_state
from runs.snapshots import run_state_fast
from runs.store import events_load, events_read
from runs.upcasters import UnsupportedVersion, event_upcast, events_upcast, payload_complete, upcast_tool_call_completed_v1_v2, upcast_tool_call_started_v1_v2
from tests.golden import FIXTURES, golden_path

pytestmark = pytest.mark.django_db

V1 = sorted((FIXTURES / "v1").glob("*.jsonl"))
REFUND = FIXTURES / "v1" / "run-refund-retry.jsonl"


def imported(path):
    result = log_import(str(path), path.read_bytes())
    assert result.outcome == "imported", result.line()
    return result.run_id


def test_this_release_reads_version_four():
    assert CURRENT_SCHEMA_VERSION == 4


@pytest.mark.parametrize("path", V1, ids=lambda p: p.stem)
def test_a_v1_log_imported_then_read_by_the_v2_reader_gives_the_upcast_state(path):
    run_id = imported(path)
    # Stored rows keep the version they were written with: the upcast happens on read only.
    assert set(Event.objects.filter(run_id=run_id).values_list("v", flat=True)) == {1}
    assert {e.v for e in events_read(run_id=run_id)} == {1}
    loaded = events_load(run_id=run_id)
    assert {e.v for e in loaded} == {CURRENT_SCHEMA_VERSION}
    lines = [json.loads(raw) for raw in path.read_text().splitlines()]
    for ev, raw in zip(loaded, lines, strict=True):
        p = raw["payload"]
        if ev.type == "tool_call_started":
            assert ev.payload["tenant"] == p["arguments"].get("tenant", "default")
            assert ev.payload["operation_id"] == p["idempotency_key"]
        elif ev.type == "tool_call_completed":
            assert ev.payload["source"] == "live"
            args = json.loads(p["signature"][len(p["name"]) + 1 :])
            assert ev.payload["tenant"] == args.get("tenant", "default")
            assert ev.payload["operation_id"] == (p["idempotency_key"] or call_key(run_id, p["name"], args))
        else:
            assert ev.payload == p
    # And the folded state is the golden one, prefix by prefix.
    golden = json.loads(golden_path(path).read_text())
    for seq, expected in golden.items():
        assert json.loads(json.dumps(run_state(run_id=run_id, at=int(seq)).to_dict())) == expected, f"{path.name} at seq {seq}"


def test_a_proven_failure_keeps_the_operation_id_its_start_had_but_occupies_no_key():
    run_id = imported(REFUND)
    by_seq = {e.seq: e for e in events_load(run_id=run_id)}
    failed, start = by_seq[5], by_seq[4]
    assert failed.payload["idempotency_key"] is None
    assert failed.payload["operation_id"] == start.payload["operation_id"] == "af1ddf2e93b322b717c74d34"
    # The fold still reads the recorded (null) key: the failure does not occupy the action's identity.
    assert "af1ddf2e93b322b717c74d34" not in run_state(run_id=run_id, at=5).completed_calls


def test_the_tenant_defaults_when_the_arguments_name_none():
    start = {"call_id": "c1", "name": "ping", "arguments": {"host": "db"}}
    up = upcast_tool_call_started_v1_v2(start, "run-a")
    assert up["tenant"] == "default"
    assert up["operation_id"] == call_key("run-a", "ping", {"host": "db"})
    done = upcast_tool_call_completed_v1_v2({"call_id": "c1", "name": "ping", "content": "pong"}, "run-a")
    assert (done["source"], done["tenant"], done["operation_id"]) == ("live", "default", None)


def test_upcasters_never_change_their_input_or_overwrite_what_an_event_carries():
    payload = {"call_id": "c1", "name": "pay", "arguments": {"tenant": "acme"}, "idempotency_key": "k1", "tenant": "other"}
    before = json.dumps(payload, sort_keys=True)
    up = upcast_tool_call_started_v1_v2(payload, "run-a")
    assert json.dumps(payload, sort_keys=True) == before
    assert (up["tenant"], up["operation_id"]) == ("other", "k1")


def test_a_current_event_passes_through_unchanged():
    ev = FoldEvent(2, "tool_call_completed", {"call_id": "c", "name": "n", "content": 1, "source": "retry"}, None, CURRENT_SCHEMA_VERSION)
    assert event_upcast(ev, "run-a") is ev


def test_a_v5_event_is_refused_by_the_reader_naming_run_seq_and_version():
    ev = FoldEvent(7, "user_message", {"content": "from the future"}, None, 5)
    with pytest.raises(UnsupportedVersion) as info:
        events_upcast([ev], "run-future")
    assert (info.value.run_id, info.value.seq, info.value.version) == ("run-future", 7, 5)
    assert "run 'run-future' seq 7 has schema version 5" in str(info.value)
    assert "upgrade Reckon" in str(info.value)


def test_a_version_below_one_is_refused_without_being_called_newer():
    with pytest.raises(UnsupportedVersion) as info:
        event_upcast(FoldEvent(3, "user_message", {"content": "x"}, None, 0), "run-a")
    assert "seq 3 has schema version 0" in str(info.value)
    assert "upgrade" not in str(info.value)


def test_a_v5_line_is_rejected_at_import_naming_run_seq_and_version(tmp_path):
    lines = REFUND.read_text().splitlines()[:3]
    future = {"seq": 4, "type": "user_message", "ts": "2026-09-08T11:00:12Z", "payload": {"content": "new"}, "v": 5}
    path = tmp_path / "run-from-the-future.jsonl"
    path.write_text("\n".join([*(line.replace("run-refund-retry", "run-from-the-future") for line in lines), json.dumps(future)]) + "\n")
    result = log_import(str(path), path.read_bytes())
    assert result.outcome == "rejected"
    # The run is the file's name; lines are checked in seq order, so line 4 is seq 4.
    assert "run-from-the-future.jsonl" in result.line()
    assert "line 4: schema version 5 is newer than this reader knows (up to 4)" in result.reason
    assert not Run.objects.filter(run_id="run-from-the-future").exists()


def _insert_raw(run_id, seq, v, type_="user_message", payload=None):
    # What a newer release would have left in the shared database: a row this release did not write.
    with connection.cursor() as cur:
        cur.execute(
            "INSERT INTO reckon_event (run_id, seq, type, v, ts, payload, epoch, recorded_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
            [run_id, seq, type_, v, "2026-09-09 10:00:00+00:00", json.dumps(payload or {"content": "written by v5"}), 1, "2026-09-09 10:00:00+00:00"],
        )
        cur.execute("UPDATE reckon_run SET last_seq = %s WHERE run_id = %s", [seq, run_id])


def test_a_v5_row_found_in_storage_is_refused_naming_run_seq_and_version():
    run_id = imported(REFUND)
    _insert_raw(run_id, 11, 5)
    for read in (lambda: run_state(run_id=run_id), lambda: run_state_fast(run_id)):
        with pytest.raises(UnsupportedVersion) as info:
            read()
        assert (info.value.run_id, info.value.seq, info.value.version) == (run_id, 11, 5)
    # The prefix before it is still readable: the refusal is of the event, not of the history.
    assert run_state(run_id=run_id, at=10).status == "finished"
    with pytest.raises(CommandError, match=r"run 'run-refund-retry' seq 11 has schema version 5"):
        call_command("replay", run_id, "--json")


# --- the permanent fixtures, every prefix, through the current reader ---------------------------

from tests.golden import fixture_logs, fixture_states  # noqa: E402

ALL = fixture_logs()


def test_there_are_fixtures_for_every_released_schema_version():
    versions = {p.parent.name for p in ALL}
    assert versions == {f"v{n}" for n in range(1, CURRENT_SCHEMA_VERSION + 1)}


@pytest.mark.parametrize("path", ALL, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_prefix_of_every_fixture_folds_to_its_golden_state(path):
    assert golden_path(path).exists(), f"{path.name} has no golden states: python -m tests.golden --write"
    golden = json.loads(golden_path(path).read_text())
    assert fixture_states(path) == golden


def test_the_v2_fixtures_say_their_version_and_cover_the_recovery_facts():
    seen, sources = set(), set()
    for path in sorted((FIXTURES / "v2").glob("*.jsonl")):
        for raw in path.read_text().splitlines():
            line = json.loads(raw)
            assert line.get("v") == 2, f"{path.name} seq {line['seq']} does not say v 2"
            seen.add(line["type"])
            p = line["payload"]
            if line["type"] in ("tool_call_started", "tool_call_completed"):
                assert {"tenant", "operation_id"} <= set(p), f"{path.name} seq {line['seq']}"
            if line["type"] == "tool_call_completed":
                sources.add(p["source"])
    assert {"run_resumed", "tool_call_uncertain", "reconciliation_attempted", "tool_call_resolved", "run_paused", "operator_note"} <= seen
    assert {"live", "reconciliation", "retry", "operator"} == sources


@pytest.mark.parametrize("path", sorted((FIXTURES / "v2").glob("*.jsonl")), ids=lambda p: p.stem)
def test_a_v2_fixture_imported_and_replayed_from_the_database_matches_its_golden_states(path):
    run_id = imported(path)
    assert set(Event.objects.filter(run_id=run_id).values_list("v", flat=True)) == {2}
    # Versions 3 and 4 changed no field of a version 2 event: each reads as the current version with its payload unchanged.
    assert [(e.seq, e.type, e.payload, e.ts) for e in events_load(run_id=run_id)] == [(e.seq, e.type, e.payload, e.ts) for e in events_read(run_id=run_id)]
    assert {e.v for e in events_load(run_id=run_id)} == {CURRENT_SCHEMA_VERSION}
    golden = json.loads(golden_path(path).read_text())
    for seq, expected in golden.items():
        assert json.loads(json.dumps(run_state(run_id=run_id, at=int(seq)).to_dict())) == expected, f"{path.name} at seq {seq}"


def test_the_tenant_read_without_an_upcast_is_the_upcast_events_tenant_in_every_version():
    # runs.tenants reads a start's tenant without upcasting it (an import reads one per call): the
    # answer must be what the upcasters and the current version's defaults give, version by version.
    from runs.tenants import _tenant_read

    argument_forms = [{"tenant": "acme"}, {"tenant": ""}, {"tenant": 7}, {"account": "4001"}, {}, ["tenant"], "x"]
    recorded_forms = [{}, {"tenant": "other"}, {"tenant": None}, {"tenant": ""}, {"operation_id": "op"}, {"idempotency_key": "k1", "signature": "pay:{}"}]
    checked = 0
    for v in range(1, CURRENT_SCHEMA_VERSION + 1):
        for arguments in argument_forms:
            for recorded in recorded_forms:
                p = {"call_id": "c1", "name": "pay", "arguments": arguments, **recorded}
                ev = FoldEvent(2, "tool_call_started", p, None, v)
                [up] = events_upcast([ev], "run-t")
                assert _tenant_read(ev) == payload_complete(up.type, up.payload, "run-t").get("tenant"), (v, p)
                checked += 1
        for p in ({"run_id": "run-t"}, {"run_id": "run-t", "tenant": "acme"}):
            ev = FoldEvent(1, "run_started", p, None, v)
            [up] = events_upcast([ev], "run-t")
            assert _tenant_read(ev) == payload_complete(up.type, up.payload, "run-t").get("tenant")
    assert checked == CURRENT_SCHEMA_VERSION * len(argument_forms) * len(recorded_forms)


def test_a_replay_stopped_by_a_gap_in_the_log_leaves_the_connection_usable_while_its_error_lives():
    import signal

    from runs.fold import FoldError

    run_id = imported(REFUND)
    _insert_raw(run_id, 12, CURRENT_SCHEMA_VERSION)  # seq 11 missing: the fold stops at seq 12

    def stuck(signum, frame):
        raise AssertionError("the connection was still held by the stopped replay")

    previous = signal.signal(signal.SIGALRM, stuck)
    signal.alarm(20)
    try:
        for read in (lambda: run_state(run_id=run_id), lambda: run_state_fast(run_id)):
            with pytest.raises(FoldError, match="event seq 12 does not follow seq 10") as info:
                read()
            # The error, and the traceback with the fold's frame, are still alive here.
            assert info.value is not None
            assert Run.objects.get(run_id=run_id).last_seq == 12
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
