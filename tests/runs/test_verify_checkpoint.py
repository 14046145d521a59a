"""A reviewer holds a checkpoint kept apart from Reckon and a bundle exported later: reckon-verify
says whether the bundle's history is the one the checkpoint pinned. A database rolled back or
rewritten after the checkpoint exports a bundle Reckon's key signs and that verifies alone; against
the checkpoint it is named."""

import json
from contextlib import redirect_stdout
from io import StringIO

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.core.management import call_command

from evidence.signing import document_sign, fingerprint
from runs.store import NewEvent, events_append
from runs.verify import main as verify_main
from tests.runs.helpers import _run, _sql

pytestmark = pytest.mark.django_db(transaction=True)


def _reckon_verify(*args) -> tuple[int, list[str]]:
    buf = StringIO()
    with redirect_stdout(buf):
        code = verify_main([str(a) for a in args])
    return code, buf.getvalue().strip().splitlines()


def _checkpoint(folder):
    call_command("checkpoint", "--out", str(folder))
    (cp,) = folder.glob("checkpoint-*.json")
    return cp, json.loads(cp.read_text())


def _export(tmp_path, name: str):
    out = tmp_path / name
    call_command("export_evidence", "r1", "--out", str(out), "--unmasked", "--reason", "audit")
    return out


def _hash_at(seq: int) -> bytes:
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("SELECT hash FROM reckon_event WHERE run_id = 'r1' AND seq = %s", [seq])
        return bytes(cur.fetchone()[0])


def _roll_back_to(seq: int) -> None:
    _sql([("DELETE FROM reckon_event WHERE run_id = 'r1' AND seq > %s", [seq]), ("UPDATE reckon_run SET last_seq = %s, finished_seq = NULL, head = %s WHERE run_id = 'r1'", [seq, _hash_at(seq)])])


def test_a_bundle_exported_after_the_checkpoint_agrees_with_it(tmp_path):
    _run("r1")
    _export(tmp_path, "first")  # an unmasked export: the run has an access record when the checkpoint is written
    (tmp_path / "cp").mkdir()
    cp, doc = _checkpoint(tmp_path / "cp")
    assert "access_count" in next(r for r in doc["runs"] if r["run_id"] == "r1")
    bundle = _export(tmp_path, "later")
    code, lines = _reckon_verify(bundle, "--checkpoint", cp)
    assert code == 0 and lines[0].startswith("verified: r1 seq 1..6 head ")
    assert lines[1] == f"checkpoint {cp} (written {doc['written_at']}): agrees at seq 6"


def test_a_run_rolled_back_after_the_checkpoint_is_named_though_its_bundle_verifies_alone(tmp_path):
    _run("r1")
    (tmp_path / "cp").mkdir()
    cp, _ = _checkpoint(tmp_path / "cp")
    _roll_back_to(4)
    bundle = _export(tmp_path, "after")
    assert _reckon_verify(bundle)[0] == 0, "signed by Reckon's own key, the rolled-back bundle verifies alone"
    assert _reckon_verify(bundle, "--checkpoint", cp) == (1, [f"checkpoint {cp}: rolled back: it holds r1 at seq 6, the bundle ends at seq 4"])


def test_a_history_rewritten_after_the_checkpoint_is_named_at_the_checkpoints_seq(tmp_path):
    lease = _run("r1")
    (tmp_path / "cp").mkdir()
    cp, doc = _checkpoint(tmp_path / "cp")
    pinned = next(r for r in doc["runs"] if r["run_id"] == "r1")["head"]
    # Rolled back and written again to beyond the checkpoint's seq: a longer, different history.
    _roll_back_to(4)
    events_append(run_id="r1", epoch=lease.epoch, expected_seq=4, events=[NewEvent("user_message", {"content": f"other {i}"}) for i in range(4)])
    bundle = _export(tmp_path, "rewritten")
    code, lines = _reckon_verify(bundle, "--checkpoint", cp)
    assert code == 1 and lines[0].startswith(f"checkpoint {cp}: head differs at seq 6: the checkpoint's is {pinned}, the bundle's ")


def test_a_checkpoint_signed_by_an_unknown_key_or_not_listing_the_run(tmp_path, settings):
    _run("r1")
    (tmp_path / "cp").mkdir()
    cp, doc = _checkpoint(tmp_path / "cp")
    bundle = _export(tmp_path, "b")
    stranger = Ed25519PrivateKey.generate()
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps(document_sign(key=stranger, doc={k: v for k, v in doc.items() if k not in ("signature", "key_fingerprint")})))
    assert _reckon_verify(bundle, "--checkpoint", forged) == (1, [f"checkpoint {forged}: signed by another key ({fingerprint(stranger)})"])
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps({**doc, "runs": [{**r, "last_seq": 2} for r in doc["runs"]]}))
    assert _reckon_verify(bundle, "--checkpoint", edited) == (1, [f"checkpoint {edited}: signature invalid"])
    # A checkpoint written before the run existed lists nothing of it: said, not a failure.
    empty = tmp_path / "empty.json"
    from evidence.signing import signing_key_load

    empty.write_text(json.dumps(document_sign(key=signing_key_load(), doc={"version": 1, "written_at": "2026-01-01T00:00:00.000000Z", "runs": []})))
    code, lines = _reckon_verify(bundle, "--checkpoint", empty, "--checkpoint", cp)
    assert code == 0 and lines[1:] == [
        f"checkpoint {empty} (written 2026-01-01T00:00:00.000000Z): does not list r1 (the run was chained after it)",
        f"checkpoint {cp} (written {doc['written_at']}): agrees at seq 6",
    ]
    # A checkpoint file that is not JSON is a usage error naming it.
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    assert _reckon_verify(bundle, "--checkpoint", bad)[0] == 2
