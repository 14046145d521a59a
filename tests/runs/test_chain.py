"""The hash chain: written by every append path, recomputed by verify_chain, which names what a
person with database access changed; the canonical encoding agrees with an independent RFC 8785
implementation; the offline verifier accepts an untouched bundle and names each kind of forgery."""

import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import orjson
import pytest
import rfc8785
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from hypothesis import given, settings
from hypothesis import strategies as st

from runs.canonical import payload_canonical
from runs.chain import chain_backfill
from runs.importer import paths_import
from runs.leases import lease_acquire
from runs.models import Event, EventHash, Run
from evidence.signing import document_sign
from runs.store import NewEvent, events_append
from runs.verify import canonical_json
from runs.verify import main as verify_main
from tests.runs.helpers import _run, _sql, _verify

FIXTURES = Path(__file__).resolve().parent.parent.parent / "fixtures" / "events"
ROOT = Path(__file__).resolve().parent.parent.parent


# --- the encoding -------------------------------------------------------------------------------

TRICKY = [0.0, -0.0, 1.0, 100.0, 0.5, 1e-6, 1e-7, 1e16, 1e20, 1e21, 1.5e21, 5e-324, 1.7976931348623157e308, 0.1 + 0.2, 123456789.125, -2.5e-8, 9007199254740993.0]


def test_the_canonicalizers_agree_with_rfc8785_on_tricky_numbers_and_escapes():
    doc = {"n": TRICKY, "s": '\x00\x01\x08\t\n\x0c\r\x1f\x7f\u2028"\\/ é 😀', "keys": {"\ue000": 1, "😀": 2, "a": 3, "B": 4}, "i": [0, -1, 2**53 - 1], "b": [True, False, None]}
    assert canonical_json(doc) == rfc8785.dumps(doc)
    stored = orjson.dumps(doc)
    assert payload_canonical(doc, stored) == rfc8785.dumps(doc)
    assert _canonical_agrees(doc)
    for x in TRICKY:
        assert _canonical_agrees({"x": x, "l": [x], "o": {"y": x}})


def test_the_canonicalizers_agree_with_rfc8785_on_every_fixture_payload():
    for path in sorted(FIXTURES.glob("v*/*.jsonl")):
        for line in path.read_bytes().splitlines():
            try:
                payload = json.loads(line)["payload"]
            except (ValueError, KeyError, TypeError):
                continue
            expected = rfc8785.dumps(payload)
            assert canonical_json(payload) == expected, path
            assert payload_canonical(payload, orjson.dumps(payload)) == expected, path


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1) | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=12,
)


def _canonical_agrees(payload) -> bool:
    """The append's inlined canonical bytes (no sealed names) are the event framed around RFC 8785's
    payload bytes, as an independent encoder writes them."""
    from datetime import datetime, timezone

    from runs.canonical import event_canon

    ts = datetime(2026, 11, 30, 12, 0, 0, 123456, tzinfo=timezone.utc)
    expected = b'{"payload":' + rfc8785.dumps(payload) + b',"seq":7,"ts":"2026-11-30T12:00:00.123456Z","type":"user_message","v":2}'
    got, salts = event_canon(seq=7, type="user_message", ts=ts, v=2, payload=payload, stored=orjson.dumps(payload), sealing=(frozenset(), ()))
    # As the store calls it: the stored text is orjson's sorted encoding, framed as it is when exact.
    stored = orjson.dumps(payload, option=orjson.OPT_SORT_KEYS)
    got_stored, salts_stored = event_canon(seq=7, type="user_message", ts=ts, v=2, payload=payload, stored=stored, sealing=(frozenset(), ()), stored_sorted=True)
    return got == expected and salts is None and got_stored == expected and salts_stored is None


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.text(max_size=6), json_values, max_size=5))
def test_the_fast_path_and_the_exact_encoder_agree_with_rfc8785_on_any_payload(payload):
    expected = rfc8785.dumps(payload)
    assert canonical_json(payload) == expected
    assert payload_canonical(payload, orjson.dumps(payload)) == expected
    assert _canonical_agrees(payload)


@settings(max_examples=2000, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_every_double_either_matches_in_orjson_or_is_sent_to_the_exact_encoder(x):
    fast = orjson.dumps({"x": x}, option=orjson.OPT_SORT_KEYS)
    assert fast == rfc8785.dumps({"x": x}) or any(m in fast for m in (b"e+", b"e-", b".0,", b".0}", b".0]"))
    assert not math.isnan(x)


# --- the chain in the database ------------------------------------------------------------------

pytestmark_db = pytest.mark.django_db(transaction=True)
SIGNING_KEY = Ed25519PrivateKey.generate()


@pytest.fixture(autouse=True)
def _signing_key(settings):
    from cryptography.hazmat.primitives.serialization import NoEncryption, PrivateFormat

    settings.RECKON_SIGNING_KEY = SIGNING_KEY.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode()


@pytestmark_db
def test_every_append_path_writes_the_chain_and_verify_chain_accepts_it():
    _run()
    assert not Event.objects.filter(run_id="r1", hash=None).exists()
    ok, rows = _verify("r1")
    assert ok, rows
    assert rows[0]["ok"] and rows[0]["last_seq"] == 6
    assert rows[0]["head"] == bytes(Run.objects.get(run_id="r1").head).hex()


def _batch(k, tag):
    return [NewEvent("user_message", {"content": f"{tag} {i}", "n": i}) for i in range(k)]


@pytestmark_db
def test_batches_linked_by_the_appending_process_chain_exactly_as_the_database_would():
    from runs import store_pg as store

    lease = lease_acquire(run_id="r1", holder="w", ttl_seconds=60)
    events_append(run_id="r1", epoch=lease.epoch, expected_seq=0, events=[NewEvent("run_started", {"run_id": "r1"})])
    seq = 1
    for tag in "abcd":  # every batch linked by this process, from the head it read or remembered
        events_append(run_id="r1", epoch=lease.epoch, expected_seq=seq, events=_batch(5, tag))
        seq += 5
    if connection.vendor == "postgresql":
        assert store._heads[(connection.alias, "r1")] == (seq, bytes(Run.objects.get(run_id="r1").head))
    ok, rows = _verify("r1")
    assert ok and rows[0]["last_seq"] == 21, rows


@pytestmark_db
def test_a_batch_from_a_head_this_process_remembers_wrongly_is_chained_from_the_stored_head():
    # Another writer, a rolled-back transaction or a rebuilt database can leave the remembered head
    # stale at the very seq the caller expects: the fence refuses it, and the append is linked again from the stored head.
    from runs import store_pg as store

    if connection.vendor != "postgresql":
        pytest.skip("SQLite links every append from the head its write transaction reads")
    lease = lease_acquire(run_id="r1", holder="w", ttl_seconds=60)
    events_append(run_id="r1", epoch=lease.epoch, expected_seq=0, events=[NewEvent("run_started", {"run_id": "r1"})])
    events_append(run_id="r1", epoch=lease.epoch, expected_seq=1, events=_batch(4, "a"))
    store._heads[(connection.alias, "r1")] = (5, hashlib.sha256(b"a head this run never had").digest())
    events_append(run_id="r1", epoch=lease.epoch, expected_seq=5, events=_batch(4, "b"))
    ok, rows = _verify("r1")
    assert ok and rows[0]["last_seq"] == 9, rows
    assert store._heads[(connection.alias, "r1")] == (9, bytes(Run.objects.get(run_id="r1").head))


@pytestmark_db
def test_a_refused_batch_from_a_remembered_head_is_diagnosed_as_before():
    from runs.errors import SeqConflict, StaleEpoch

    lease = lease_acquire(run_id="r1", holder="w", ttl_seconds=60)
    events_append(run_id="r1", epoch=lease.epoch, expected_seq=0, events=[NewEvent("run_started", {"run_id": "r1"})])
    events_append(run_id="r1", epoch=lease.epoch, expected_seq=1, events=_batch(3, "a"))
    events_append(run_id="r1", epoch=lease.epoch, expected_seq=4, events=_batch(3, "b"))  # head remembered at seq 7
    with pytest.raises(StaleEpoch):
        events_append(run_id="r1", epoch=lease.epoch - 1, expected_seq=7, events=_batch(3, "c"))
    # A single append (which this process does not remember) moves the run on: the remembered head
    # is at the seq the caller still expects, and the refusal names the run's real last seq.
    events_append(run_id="r1", epoch=lease.epoch, expected_seq=7, events=[NewEvent("user_message", {"content": "single"})])
    with pytest.raises(SeqConflict, match="expected 7, the run's last seq is 8"):
        events_append(run_id="r1", epoch=lease.epoch, expected_seq=7, events=_batch(3, "c"))
    assert list(Event.objects.filter(run_id="r1").values_list("seq", flat=True).order_by("seq")) == list(range(1, 9))
    events_append(run_id="r1", epoch=lease.epoch, expected_seq=8, events=_batch(3, "c"))
    ok, rows = _verify("r1")
    assert ok and rows[0]["last_seq"] == 11, rows


@pytestmark_db
def test_a_sealed_whole_double_is_committed_as_rfc8785_writes_it():
    # orjson writes 100.0 where RFC 8785 writes 100: a sealed value that is such a number on its own
    # must be committed over the latter, or verify_chain (and reckon-verify) would call it changed.
    from runs import canonical

    before = canonical._provider
    canonical.sealed_names_provider_set(lambda: frozenset({"amount"}))
    try:
        lease = lease_acquire(run_id="r1", holder="w", ttl_seconds=60)
        events_append(run_id="r1", epoch=lease.epoch, expected_seq=0, events=[NewEvent("run_started", {"run_id": "r1"})])
        events_append(run_id="r1", epoch=lease.epoch, expected_seq=1, events=[NewEvent("user_message", {"content": "pay", "amount": 100.0})])
        events_append(run_id="r1", epoch=lease.epoch, expected_seq=2, events=[NewEvent("user_message", {"content": "pay", "amount": x}) for x in (-0.0, 2.0, 0.5)])
    finally:
        canonical.sealed_names_provider_set(before)
    ok, rows = _verify("r1")
    assert ok and rows[0]["last_seq"] == 5, rows


@pytestmark_db
def test_it_names_a_changed_payload():
    _run()
    _sql([("UPDATE reckon_event SET payload = %s WHERE run_id = 'r1' AND seq = 4", ['{"content": "m2", "ratio": 3.0, "big": 1000000000000000000}'])])
    ok, rows = _verify("r1")
    assert not ok and rows[0]["problem"] == "payload changed" and rows[0]["seq"] == 4


@pytestmark_db
def test_it_names_a_deleted_event():
    _run()
    _sql([("DELETE FROM reckon_event WHERE run_id = 'r1' AND seq = 3", [])])
    ok, rows = _verify("r1")
    assert not ok and rows[0]["problem"] == "event missing" and rows[0]["seq"] == 3


@pytestmark_db
def test_it_names_two_swapped_events():
    _run()
    _sql(
        [
            ("UPDATE reckon_event SET seq = 100 WHERE run_id = 'r1' AND seq = 3", []),
            ("UPDATE reckon_event SET seq = 3 WHERE run_id = 'r1' AND seq = 4", []),
            ("UPDATE reckon_event SET seq = 4 WHERE run_id = 'r1' AND seq = 100", []),
        ]
    )
    ok, rows = _verify("r1")
    assert not ok and rows[0]["problem"] == "order changed" and rows[0]["seq"] == 3


@pytestmark_db
def test_it_names_a_truncated_tail_and_a_head_that_differs_from_the_run_row():
    _run()
    _sql([("DELETE FROM reckon_event WHERE run_id = 'r1' AND seq = 6", [])])
    ok, rows = _verify("r1")
    assert not ok and rows[0]["problem"] == "event missing" and rows[0]["seq"] == 6
    _run("r2")
    Run.objects.filter(run_id="r2").update(head=b"\x00" * 32)
    ok, rows = _verify("r2")
    assert not ok and rows[0]["problem"] == "head differs"


@pytestmark_db
def test_a_checkpoint_reveals_a_run_rolled_back_or_deleted_after_it(tmp_path):
    _run("r1")
    _run("r2")
    call_command("checkpoint", "--out", str(tmp_path))
    (cp,) = tmp_path.glob("checkpoint-*.json")
    assert _verify(checkpoint=cp)[0]
    # Roll r1 back consistently (events, last seq and head), as someone with database access could.
    with connection.cursor() as cur:
        cur.execute("SELECT hash FROM reckon_event WHERE run_id = 'r1' AND seq = 4")
        prev = bytes(cur.fetchone()[0])
    _sql(
        [
            ("DELETE FROM reckon_event WHERE run_id = 'r1' AND seq > 4", []),
            ("UPDATE reckon_run SET last_seq = 4, finished_seq = NULL, head = %s WHERE run_id = 'r1'", [prev]),
            ("DELETE FROM reckon_event WHERE run_id = 'r2'", []),
            ("DELETE FROM reckon_run WHERE run_id = 'r2'", []),
        ]
    )
    assert _verify("r1")[0], "without a checkpoint the rollback is self-consistent"
    ok, rows = _verify(checkpoint=cp)
    got = {r["run_id"]: r.get("problem") for r in rows}
    assert not ok and got == {"r1": "rolled back", "r2": "run deleted"}
    # A checkpoint edited to hide it no longer verifies.
    doc = json.loads(cp.read_text())
    doc["runs"] = [r for r in doc["runs"] if r["run_id"] != "r2"]
    cp.write_text(json.dumps(doc))
    with pytest.raises(CommandError, match="signature invalid"):
        call_command("verify_chain", "--checkpoint", str(cp))


@pytestmark_db
def test_a_checkpoint_reveals_history_rewritten_before_it_in_a_run_that_went_on(tmp_path):
    from runs.chain import chain_rows, event_chain_canonical
    from runs.verify import event_link, genesis

    lease = lease_acquire(run_id="r1", holder="w", ttl_seconds=60)
    events_append(run_id="r1", epoch=lease.epoch, expected_seq=0, events=[NewEvent("run_started", {"run_id": "r1"})])
    events_append(run_id="r1", epoch=lease.epoch, expected_seq=1, events=[NewEvent("user_message", {"content": f"m{i}"}) for i in range(2)])
    call_command("checkpoint", "--out", str(tmp_path))
    (cp,) = tmp_path.glob("checkpoint-*.json")
    events_append(run_id="r1", epoch=lease.epoch, expected_seq=3, events=[NewEvent("user_message", {"content": f"later {i}"}) for i in range(3)])
    # Rewrite seq 2 and every hash from there on, and the head, as someone with database access
    # (but without the signing key) could: the chain alone is consistent again.
    statements = [("UPDATE reckon_event SET payload = %s WHERE run_id = 'r1' AND seq = 2", [json.dumps({"content": "rewritten"})])]
    prev = genesis("r1")
    for seq, type_, v, ts, payload, _, salts in chain_rows("r1"):
        if seq == 2:
            payload = {"content": "rewritten"}
        prev = event_link(prev, seq, event_chain_canonical(seq, type_, v, ts, payload, salts))
        statements.append(("UPDATE reckon_event SET hash = %s WHERE run_id = 'r1' AND seq = %s", [prev, seq]))
    statements.append(("UPDATE reckon_run SET head = %s WHERE run_id = 'r1'", [prev]))
    _sql(statements)
    assert _verify("r1")[0], "without a checkpoint the rewrite is self-consistent"
    ok, rows = _verify("r1", checkpoint=cp)
    assert not ok and (rows[0]["problem"], rows[0]["seq"]) == ("head differs from checkpoint", 3)


@pytestmark_db
def test_the_v1_and_v2_fixtures_import_chained_and_verify():
    results = paths_import([str(FIXTURES / "v1"), str(FIXTURES / "v2")])
    imported = [r for r in results if r.outcome in ("imported", "extended")]
    assert imported
    assert not Event.objects.filter(hash=None).exists()
    ok, rows = _verify()
    assert ok, [r for r in rows if not r["ok"]]


@pytestmark_db
def test_backfill_chains_a_run_recorded_before_the_chain_and_leaves_event_rows_untouched():
    _run()
    # What a database from before the chain looks like: no hashes, no head.
    rows = list(Event.objects.filter(run_id="r1").order_by("seq").values_list("seq", "type", "v", "ts", "payload", "epoch"))
    with connection.cursor() as cur:
        if connection.vendor == "postgresql":
            cur.execute("ALTER TABLE reckon_event DISABLE TRIGGER reckon_event_append_only")
        cur.execute("DELETE FROM reckon_event WHERE run_id = 'r1'")
        for seq, type_, v, ts, payload, epoch in rows:
            cur.execute(
                "INSERT INTO reckon_event (run_id, seq, type, v, ts, payload, epoch, recorded_at) VALUES ('r1', %s, %s, %s, %s, %s, %s, %s)", [seq, type_, v, ts, json.dumps(payload), epoch, ts]
            )
        cur.execute("UPDATE reckon_run SET head = NULL WHERE run_id = 'r1'")
        if connection.vendor == "postgresql":
            cur.execute("ALTER TABLE reckon_event ENABLE TRIGGER reckon_event_append_only")
    ok, out = _verify("r1")
    assert not ok and out[0]["problem"] == "not chained"
    assert chain_backfill(run_id="r1") == 6
    assert EventHash.objects.filter(run_id="r1").count() == 6
    assert Event.objects.filter(run_id="r1", hash=None).count() == 6  # the event rows were not updated
    assert _verify("r1")[0]


# --- the bundle and the offline verifier --------------------------------------------------------


def _bundle(tmp_path, run_id="r1"):
    out = tmp_path / "bundle"
    call_command("export_evidence", run_id, "--out", str(out), "--unmasked")
    return out


def _check(path, *extra):
    from contextlib import redirect_stdout
    from io import StringIO

    buf = StringIO()
    with redirect_stdout(buf):
        code = verify_main([str(path), *extra])
    return code, buf.getvalue().strip()


@pytestmark_db
def test_an_untouched_bundle_verifies_in_a_process_that_cannot_import_django(tmp_path):
    _run()
    out = _bundle(tmp_path)
    # A folder with only the verifier module on the path, and Django made unimportable.
    isolated = tmp_path / "isolated"
    isolated.mkdir()
    shutil.copy(ROOT / "runs" / "verify.py", isolated / "verify.py")
    (isolated / "django.py").write_text("raise ImportError('no Django here')\n")
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(isolated)}
    zip_path = tmp_path / "bundle.zip"
    with zipfile.ZipFile(zip_path, "w") as zf:
        for f in out.iterdir():
            zf.write(f, f"r1/{f.name}")
    for target in (out, zip_path):
        proc = subprocess.run([sys.executable, "-I", str(isolated / "verify.py"), str(target)], check=False, capture_output=True, text=True, env=env, cwd=isolated)
        head = bytes(Run.objects.get(run_id="r1").head).hex()
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert proc.stdout.strip() == f"verified: r1 seq 1..6 head {head}"


@pytestmark_db
def test_the_verifier_names_each_forgery(tmp_path):
    _run()
    out = _bundle(tmp_path)
    original = {f.name: f.read_bytes() for f in out.iterdir()}

    def fresh():
        for name, data in original.items():
            (out / name).write_bytes(data)

    lines = original["events.jsonl"].decode().splitlines()

    # One byte of one payload.
    fresh()
    (out / "events.jsonl").write_text("\n".join(lines[:3] + [lines[3].replace('"m1"', '"m9"')] + lines[4:]) + "\n")
    assert _check(out) == (1, "line 4: hash mismatch (seq 4)")
    # A deleted event.
    fresh()
    (out / "events.jsonl").write_text("\n".join(lines[:2] + lines[3:]) + "\n")
    assert _check(out) == (1, "missing seq 3")
    # Two swapped events.
    fresh()
    (out / "events.jsonl").write_text("\n".join(lines[:2] + [lines[3], lines[2]] + lines[4:]) + "\n")
    assert _check(out) == (1, "missing seq 3")
    # A truncated tail.
    fresh()
    (out / "events.jsonl").write_text("\n".join(lines[:-1]) + "\n")
    assert _check(out) == (1, "truncated: manifest says 6, file has 5")
    # A forged manifest (the head of a shorter log), keeping the old signature.
    fresh()
    manifest = json.loads(original["manifest.json"])
    (out / "manifest.json").write_text(json.dumps({**manifest, "last_seq": 5}))
    assert _check(out) == (1, "signature invalid")
    # A bundle re-signed by another key: verifies alone, refused against the pinned key.
    fresh()
    other = Ed25519PrivateKey.generate()
    forged = document_sign(key=other, doc={k: v for k, v in manifest.items() if k not in ("signature", "key_fingerprint")})
    (out / "manifest.json").write_text(json.dumps(forged))
    (out / "public_key.pem").write_bytes(other.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo))
    pinned = tmp_path / "pinned.pem"
    pinned.write_bytes(original["public_key.pem"])
    assert _check(out, "--public-key", str(pinned)) == (1, "signature invalid: the bundle's public key is not the pinned one")
    # A manifest whose head differs from the events, signed by the right key.
    fresh()
    wrong = document_sign(key=SIGNING_KEY, doc={**{k: v for k, v in manifest.items() if k not in ("signature", "key_fingerprint")}, "head": "00" * 32})
    (out / "manifest.json").write_text(json.dumps(wrong))
    assert _check(out) == (1, "manifest head differs")
    # Chain fields a verifier cannot use, signed by the right key: named, not guessed at.
    body = {k: v for k, v in manifest.items() if k not in ("signature", "key_fingerprint")}
    for change, named in (
        ({"chain": "reckon/chain/v9"}, "manifest chain 'reckon/chain/v9' is not 'reckon/chain/v3'"),
        ({"chain_v2_upto": "all"}, "manifest chain_v2_upto is not a whole number"),
        ({"withheld_prev": ["00" * 32]}, "manifest withheld_prev is not an object"),
        # Chain v2 claimed for events chain v3 linked: the first event no longer hashes to its line.
        ({"chain_v2_upto": 6}, "line 1: hash mismatch (seq 1)"),
    ):
        fresh()
        (out / "manifest.json").write_text(json.dumps(document_sign(key=SIGNING_KEY, doc={**body, **change})))
        assert _check(out) == (1, named)
    # Untouched, against the pinned key.
    fresh()
    assert _check(out, "--public-key", str(pinned))[0] == 0


def test_the_console_script_is_installed():
    assert shutil.which("reckon-verify", path=str(Path(sys.executable).parent))


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_head_remembered_by_a_rolled_back_append_never_links_the_next_one():
    # The remembered head is only a hint: a transaction rolled back after its append leaves it
    # naming a head the run never kept, and another writer (here a thread on its own connection)
    # then moves the run to that very seq with other events. The next append of this process
    # expects that seq: the fence refuses the stale head, and the append is linked from the
    # stored one, so the chain verifies.
    import threading

    from django.db import connections, transaction

    from runs import store_pg

    if connection.vendor != "postgresql":
        pytest.skip("the remembered head is PostgreSQL's")
    lease = lease_acquire(run_id="r1", holder="w", ttl_seconds=60)
    events_append(run_id="r1", epoch=lease.epoch, expected_seq=0, events=[NewEvent("run_started", {"run_id": "r1"})])
    with pytest.raises(RuntimeError), transaction.atomic():
        events_append(run_id="r1", epoch=lease.epoch, expected_seq=1, events=_batch(3, "rolled back"))
        raise RuntimeError
    stale = store_pg._heads[(connection.alias, "r1")]
    assert stale[0] == 4

    def other_writer():
        try:
            events_append(run_id="r1", epoch=lease.epoch, expected_seq=1, events=_batch(3, "other"))
            store_pg._heads.pop((connection.alias, "r1"), None)  # its own process would remember its own
        finally:
            connections.close_all()

    store_pg._heads[(connection.alias, "r1")] = stale
    t = threading.Thread(target=other_writer)
    t.start()
    t.join()
    store_pg._heads[(connection.alias, "r1")] = stale  # as this process still remembers it
    events_append(run_id="r1", epoch=lease.epoch, expected_seq=4, events=_batch(2, "next"))
    ok, rows = _verify("r1")
    assert ok and rows[0]["last_seq"] == 6, rows
    assert store_pg._heads[(connection.alias, "r1")] == (6, bytes(Run.objects.get(run_id="r1").head))
