"""Chain v3 is the evidence contract's formula, hash(n) = sha256(hash(n - 1) || canonical(event n)):
every append path writes it, as a verifier written from the contract alone computes it (hashlib
and an independent RFC 8785 encoder). A run chained by chain v2 before the upgrade keeps its hashes
and goes on with v3, and bundles exported before the upgrade still verify."""

import hashlib
import importlib
import json
import shutil
from datetime import UTC
from io import StringIO
from pathlib import Path

import pytest
import rfc8785
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from runs.leases import lease_acquire
from runs.models import Event, Run
from runs.store import NewEvent, events_append
from runs.chain import chain_rows, event_chain_canonical
from runs.verify import chain_link, digest, files_verify, genesis, ts_text
from runs.verify import main as verify_main
from tests.runs.helpers import _sql

pytestmark = pytest.mark.django_db(transaction=True)
ROOT = Path(__file__).resolve().parent.parent.parent
V2_BUNDLES = ROOT / "fixtures" / "evidence-v2"
KEY = Ed25519PrivateKey.generate()


@pytest.fixture(autouse=True)
def _signing_key(settings):
    settings.RECKON_SIGNING_KEY = KEY.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode()


def _contract_hashes(run_id: str, rows) -> list[bytes]:
    """The chain as the contract defines it, with the canonical event as docs/evidence.md does:
    hashlib and RFC 8785, and the salts of sealed values (here, the run's key secret) as stored."""
    with connection.cursor() as cur:
        cur.execute("SELECT seq, salts FROM reckon_event_seal WHERE run_id = %s", [run_id])
        salts = {seq: json.loads(s) for seq, s in cur.fetchall()}
    prev = hashlib.sha256(b"reckon/chain/v3\n" + run_id.encode()).digest()
    out = []
    for seq, type_, v, ts, payload in rows:
        event = {"payload": dict(payload), "seq": seq, "ts": ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"), "type": type_, "v": v}
        if seq in salts:
            sealed = {}
            for pointer, salt in salts[seq].items():
                key = pointer[1:]
                assert pointer == "/" + key and "/" not in key and "~" not in key  # a top-level field here
                sealed[pointer] = hashlib.sha256(bytes.fromhex(salt) + rfc8785.dumps(payload[key])).hexdigest()
                event["payload"][key] = "[sealed]"
            event["sealed"] = sealed
        prev = hashlib.sha256(prev + rfc8785.dumps(event)).digest()
        out.append(prev)
    return out


def _append_every_way(run_id: str) -> None:
    lease = lease_acquire(run_id=run_id, holder="w", ttl_seconds=60)
    seq = 0

    def add(*events):
        nonlocal seq
        events_append(run_id=run_id, epoch=lease.epoch, expected_seq=seq, events=list(events))
        seq += len(events)

    add(NewEvent("run_started", {"run_id": run_id}))
    add(NewEvent("user_message", {"content": "Reconcile ledger 4010 for October.", "lang": "en-GB"}))  # single
    # A batch the database links (this process knows no head yet), then one it links itself.
    add(*[NewEvent("model_turn", {"text": f"step {i}", "ratio": 1.0 + i, "cost_usd": 0.0031, "note": "é 😀 \u2028"}) for i in range(4)])
    add(*[NewEvent("user_message", {"content": f"more {i}", "tiny": 1e-7, "huge": 1e21}) for i in range(3)])
    add(NewEvent("run_finished", {"outcome": "ok"}))  # single, finishing


def _rows(run_id: str):
    return list(Event.objects.filter(run_id=run_id).order_by("seq").values_list("seq", "type", "v", "ts", "payload"))


def test_every_append_path_chains_as_the_contract_says():
    _append_every_way("r3")
    rows = _rows("r3")
    stored = [bytes(h) for h in Event.objects.filter(run_id="r3").order_by("seq").values_list("hash", flat=True)]
    assert len(rows) == 10 and stored == _contract_hashes("r3", rows)
    assert bytes(Run.objects.get(run_id="r3").head) == stored[-1]
    buf = StringIO()
    call_command("verify_chain", "r3", stdout=buf)
    assert buf.getvalue().strip() == f"run r3: ok, seq 1..10 head {stored[-1].hex()}"


def _make_v2(run_id: str) -> list[bytes]:
    """Turn ``run_id`` into what an upgraded database holds for a run chain v2 chained: each event
    linked by its digest from the v2 genesis, and chain_v2_upto set by migration 0011's statement."""
    mark_v2 = importlib.import_module("runs.migrations.0011_chain_v3").MARK_V2  # its name begins with a digit
    rows = list(Event.objects.filter(run_id=run_id).order_by("seq").values_list("seq", "type", "v", "ts", "payload", "epoch", "recorded_at"))
    salts = {seq: s for seq, *_, s in chain_rows(run_id)}
    prev = genesis(run_id, v2_upto=len(rows))
    hashes = []
    statements = [("DELETE FROM reckon_event WHERE run_id = %s", [run_id])]
    for seq, type_, v, ts, payload, epoch, recorded_at in rows:
        prev = chain_link(prev, digest(event_chain_canonical(seq, type_, v, ts, payload, salts[seq])))
        hashes.append(prev)
        statements.append(
            (
                "INSERT INTO reckon_event (run_id, seq, type, v, ts, payload, epoch, recorded_at, hash) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                [run_id, seq, type_, v, ts, json.dumps(payload), epoch, recorded_at, prev],
            )
        )
    statements += [("UPDATE reckon_run SET head = %s, chain_v2_upto = NULL WHERE run_id = %s", [prev, run_id]), (mark_v2, [])]
    _sql(statements)
    return hashes


def test_a_run_chained_by_v2_keeps_its_hashes_and_goes_on_with_v3(tmp_path):
    lease = lease_acquire(run_id="old", holder="w", ttl_seconds=60)
    events_append(run_id="old", epoch=lease.epoch, expected_seq=0, events=[NewEvent("run_started", {"run_id": "old"})])
    events_append(run_id="old", epoch=lease.epoch, expected_seq=1, events=[NewEvent("user_message", {"content": f"m{i}"}) for i in range(3)])
    lease_acquire(run_id="empty", holder="w", ttl_seconds=60)  # no events yet: chained by v3 from its start
    v2 = _make_v2("old")
    assert Run.objects.get(run_id="old").chain_v2_upto == 4 and Run.objects.get(run_id="empty").chain_v2_upto is None
    # The run goes on after the upgrade: a single append and a batch, linked by their bytes.
    events_append(run_id="old", epoch=lease.epoch, expected_seq=4, events=[NewEvent("user_message", {"content": "after"})])
    events_append(run_id="old", epoch=lease.epoch, expected_seq=5, events=[NewEvent("model_turn", {"text": f"t{i}"}) for i in range(2)])
    rows = _rows("old")
    stored = [bytes(h) for h in Event.objects.filter(run_id="old").order_by("seq").values_list("hash", flat=True)]
    assert stored[:4] == v2
    prev = v2[-1]
    for (seq, type_, v, ts, payload), h in zip(rows[4:], stored[4:], strict=True):
        prev = hashlib.sha256(prev + rfc8785.dumps({"payload": payload, "seq": seq, "ts": ts_text(ts), "type": type_, "v": v})).digest()
        assert h == prev, seq
    buf = StringIO()
    call_command("verify_chain", "old", stdout=buf)
    assert buf.getvalue().strip() == f"run old: ok, seq 1..7 head {stored[-1].hex()}"
    # Its bundle says how far chain v2 went, and verifies offline.
    out = tmp_path / "bundle"
    call_command("export_evidence", "old", "--out", str(out), "--unmasked", "--reason", "upgrade check", stdout=StringIO())
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["chain"] == "reckon/chain/v3" and manifest["chain_v2_upto"] == 4
    assert files_verify({f.name: f.read_bytes() for f in out.iterdir()}).startswith(f"verified: old seq 1..7 head {stored[-1].hex()}")
    # A change to an event chain v2 linked is still named where it is.
    _sql([("UPDATE reckon_event SET payload = %s WHERE run_id = 'old' AND seq = 3", [json.dumps({"content": "m9"})])])
    buf = StringIO()
    with pytest.raises(CommandError):
        call_command("verify_chain", "old", stdout=buf)
    assert buf.getvalue().strip() == "run old seq 3: payload changed: the stored event does not match the hash recorded when it was appended"


def _verify(*args) -> tuple[int, str]:
    from contextlib import redirect_stdout

    buf = StringIO()
    with redirect_stdout(buf):
        code = verify_main([str(a) for a in args])
    return code, buf.getvalue().strip()


def test_bundles_exported_before_chain_v3_still_verify_and_tampering_with_them_is_named(tmp_path):
    key = V2_BUNDLES / "masked" / "public_key.pem"
    checkpoint = V2_BUNDLES / "checkpoint.json"
    code, said = _verify(V2_BUNDLES / "unmasked", "--public-key", key, "--checkpoint", checkpoint)
    assert code == 0 and said.splitlines()[0] == "verified: run-acme seq 1..11 head b48e0e37f84b945b53e34cf004467aebae12b084a96a1f4c5cb9cc257abb8fdb"
    assert "agrees at seq 11" in said.splitlines()[1]
    # The masked one (its events withheld by their digests) verifies alone, and the checkpoint,
    # written after an unmasked export was recorded, names it as older than itself.
    assert _verify(V2_BUNDLES / "masked", "--public-key", key)[0] == 0
    code, said = _verify(V2_BUNDLES / "masked", "--checkpoint", checkpoint)
    assert code == 1 and said.endswith("access rolled back: it holds 1 access records, the bundle 0")
    # One byte of one payload.
    forged = tmp_path / "forged"
    shutil.copytree(V2_BUNDLES / "unmasked", forged)
    events = (forged / "events.jsonl").read_text()
    (forged / "events.jsonl").write_text(events.replace('"amount":"840.00"', '"amount":"841.00"', 1))
    code, said = _verify(forged)
    assert code == 1 and said == "line 3: hash mismatch (seq 3)"
    # A manifest that claims chain v3 for them is not the one signed.
    shutil.copytree(V2_BUNDLES / "unmasked", tmp_path / "claimed")
    manifest = json.loads((tmp_path / "claimed" / "manifest.json").read_text())
    manifest.update(chain="reckon/chain/v3", chain_v2_upto=0)
    (tmp_path / "claimed" / "manifest.json").write_text(json.dumps(manifest))
    assert _verify(tmp_path / "claimed") == (1, "signature invalid")
