"""Rotating the signing key: checkpoints signed by a retired key still verify (and still catch a
rollback), a reviewer pins every key Reckon has signed with as one keyring, and a key Reckon never
used is refused by name."""

import json
from contextlib import redirect_stdout
from io import StringIO

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, PublicFormat
from django.core.management import call_command
from django.core.management.base import CommandError

from evidence.signing import document_sign, fingerprint
from runs.verify import main as verify_main
from tests.runs.helpers import _run, _sql, _verify

pytestmark = pytest.mark.django_db(transaction=True)

OLD, NEW, STRANGER = (Ed25519PrivateKey.generate() for _ in range(3))


def _private(key) -> str:
    return key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode()


def _public(key) -> str:
    return key.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo).decode()


def _rotate(settings, *, retired: str = "") -> None:
    settings.RECKON_SIGNING_KEY = _private(NEW)
    settings.RECKON_SIGNING_KEYS_RETIRED = retired


def _command(*args) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def _reckon_verify(*args) -> tuple[int, str]:
    buf = StringIO()
    with redirect_stdout(buf):
        code = verify_main([str(a) for a in args])
    return code, buf.getvalue().strip()


def test_a_checkpoint_signed_before_a_rotation_verifies_with_the_retired_key_and_still_catches_a_rollback(settings, tmp_path):
    settings.RECKON_SIGNING_KEY = _private(OLD)
    _run("r1")
    call_command("checkpoint", "--out", str(tmp_path))
    (cp,) = tmp_path.glob("checkpoint-*.json")

    # The new key alone does not know the old checkpoint, and says whose it is.
    _rotate(settings)
    with pytest.raises(CommandError, match=rf"signed by another key \({fingerprint(OLD)}\), neither RECKON_SIGNING_KEY nor one in RECKON_SIGNING_KEYS_RETIRED"):
        call_command("verify_chain", "--checkpoint", str(cp))

    # Retired (its public half only, beside another retired key), it does.
    _rotate(settings, retired=_public(STRANGER) + "\n" + _public(OLD))
    out = _command("verify_chain", "--checkpoint", str(cp))
    assert f"signed by {fingerprint(OLD)}, 1 runs" in out and "run r1: ok" in out

    # A rollback after it is still named against it.
    with_hash = _sql_head_at("r1", 4)
    _sql([("DELETE FROM reckon_event WHERE run_id = 'r1' AND seq > 4", []), ("UPDATE reckon_run SET last_seq = 4, finished_seq = NULL, head = %s WHERE run_id = 'r1'", [with_hash])])
    ok, rows = _verify(checkpoint=cp)
    assert not ok and rows[0]["problem"] == "rolled back"

    # A checkpoint claiming the retired key's fingerprint but signed by another key is refused.
    doc = json.loads(cp.read_text())
    forged = document_sign(key=STRANGER, doc={k: v for k, v in doc.items() if k not in ("signature", "key_fingerprint")})
    forged["key_fingerprint"] = fingerprint(OLD)
    cp.write_text(json.dumps(forged))
    with pytest.raises(CommandError, match="signature invalid"):
        call_command("verify_chain", "--checkpoint", str(cp))


def _sql_head_at(run_id: str, seq: int) -> bytes:
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("SELECT hash FROM reckon_event WHERE run_id = %s AND seq = %s", [run_id, seq])
        return bytes(cur.fetchone()[0])


def test_a_reviewer_pins_the_keyring_and_verifies_bundles_signed_before_and_after_the_rotation(settings, tmp_path):
    settings.RECKON_SIGNING_KEY = _private(OLD)
    _run("r1")
    before = tmp_path / "before"
    call_command("export_evidence", "r1", "--out", str(before))
    _rotate(settings, retired=_public(OLD))
    after = tmp_path / "after"
    call_command("export_evidence", "r1", "--out", str(after))

    ring = tmp_path / "reckon-keys.pem"
    out = _command("signing_key", "--keyring", str(ring))
    assert out.splitlines() == [f"signing key {fingerprint(NEW)}", f"retired key {fingerprint(OLD)}", f"wrote 2 public keys to {ring}"]
    for bundle in (before, after):
        assert _reckon_verify(bundle, "--public-key", ring)[0] == 0

    # The same two keys as two files.
    old_pem, new_pem = tmp_path / "old.pem", tmp_path / "new.pem"
    old_pem.write_text(_public(OLD))
    new_pem.write_text(_public(NEW))
    assert _reckon_verify(before, "--public-key", old_pem, "--public-key", new_pem)[0] == 0
    # One key pinned: the other's bundle is refused as before.
    assert _reckon_verify(after, "--public-key", old_pem) == (1, "signature invalid: the bundle's public key is not the pinned one")

    # A bundle re-signed by a key Reckon never used is refused against the keyring.
    manifest = json.loads((after / "manifest.json").read_text())
    forged = document_sign(key=STRANGER, doc={k: v for k, v in manifest.items() if k not in ("signature", "key_fingerprint")})
    (after / "manifest.json").write_text(json.dumps(forged))
    (after / "public_key.pem").write_text(_public(STRANGER))
    assert _reckon_verify(after, "--public-key", ring) == (1, "signature invalid: the bundle's public key is none of the 2 pinned ones")


def test_a_keyring_that_is_not_usable_is_named(settings, tmp_path, capsys):
    settings.RECKON_SIGNING_KEY = _private(OLD)
    settings.RECKON_SIGNING_KEYS_RETIRED = "-----BEGIN PUBLIC KEY-----\nbm90IGEga2V5\n-----END PUBLIC KEY-----\n"
    with pytest.raises(CommandError, match="RECKON_SIGNING_KEYS_RETIRED: not an Ed25519 public key|RECKON_SIGNING_KEYS_RETIRED: not a PEM public key"):
        call_command("signing_key")
    settings.RECKON_SIGNING_KEYS_RETIRED = "not pem at all"
    with pytest.raises(CommandError, match="RECKON_SIGNING_KEYS_RETIRED: not a PEM public key"):
        call_command("signing_key")

    _run("r1")
    bundle = tmp_path / "b"
    settings.RECKON_SIGNING_KEYS_RETIRED = ""
    call_command("export_evidence", "r1", "--out", str(bundle))
    ring = tmp_path / "ring.pem"
    ring.write_text(_public(OLD) + "-----BEGIN PUBLIC KEY-----\nbm90IGEga2V5\n-----END PUBLIC KEY-----\n")
    assert _reckon_verify(bundle, "--public-key", ring)[0] == 2
    assert f"--public-key {ring} (key 2 of 2): not" in capsys.readouterr().err
