"""Evidence bundles with sensitive values: a masked bundle withholds every one of them and still
verifies, an unmasked one shows them with their salts, tampering with either is named, and the
access records are chained so that who saw what cannot be quietly edited."""

from __future__ import annotations

import json
import sys
from io import StringIO
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from access.models import AccessRecord
from runs.verify import Problem, bundle_verify, files_verify
from tests.access.seed import SECRET, secret_in, seed_runs

pytestmark = pytest.mark.django_db(transaction=True)
KEY = Ed25519PrivateKey.generate()


@pytest.fixture(autouse=True)
def _key(settings):
    settings.RECKON_SIGNING_KEY = KEY.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode()


@pytest.fixture
def seeded():
    return seed_runs()


def _export(tmp_path: Path, *extra: str) -> tuple[Path, str]:
    out = tmp_path / ("unmasked" if "--unmasked" in extra else "masked")
    buf = StringIO()
    call_command("export_evidence", "run-acme", "--out", str(out), "--by", "carol", *extra, stdout=buf)
    return out, buf.getvalue().strip()


def _lines(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "events.jsonl").read_text().splitlines()]


def test_a_masked_bundle_by_default_shows_no_sensitive_value_and_still_verifies(seeded, tmp_path):
    out, said = _export(tmp_path)
    assert said.startswith("verified: run-acme seq 1..")
    assert bundle_verify(out) == said
    for f in out.iterdir():
        assert not secret_in(f.read_bytes()), f"{f.name} shows a sensitive value"
    lines = _lines(out)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["masked"] is True and manifest["exported_by"] == "carol"
    started = next(ln for ln in lines if ln.get("type") == "tool_call_started")
    # The account is withheld as a commitment; everything else of the call is shown as recorded.
    assert started["payload"]["arguments"]["account"] == "[masked]"
    assert started["payload"]["arguments"]["amount"] == "840.00"
    assert set(started["sealed"]["/arguments/account"]) == {"commitment"}
    # The receiver's page quoting the account in words was sealed nowhere: withheld, by its hash.
    assert any("withheld" in ln for ln in lines)
    # The report says what binds a withheld event: the hash before it, which the manifest signed.
    withheld = next(ln for ln in lines if "withheld" in ln)
    assert manifest["withheld_prev"][str(withheld["seq"])] == lines[withheld["seq"] - 2]["hash"]
    assert f"the hash before it, signed in the manifest: <code>{lines[withheld['seq'] - 2]['hash'][:16]}" in (out / "report.html").read_text()
    assert not AccessRecord.objects.filter(run_id="run-acme", front_end="export").exists()  # a masked bundle shows nothing


def test_an_unmasked_bundle_shows_values_with_their_salts_and_is_recorded_first(seeded, tmp_path):
    out, said = _export(tmp_path, "--unmasked", "--reason", "audit 7")
    assert said.startswith("verified: run-acme")
    assert SECRET.encode() in (out / "events.jsonl").read_bytes()
    lines = _lines(out)
    started = next(ln for ln in lines if ln.get("type") == "tool_call_started")
    assert started["payload"]["arguments"]["account"] == SECRET and "salt" in started["sealed"]["/arguments/account"]
    assert not any("withheld" in ln for ln in lines)
    # The run's key secret is never shown, not even unmasked.
    first = lines[0]
    assert first["payload"]["key_secret"] == "[masked]" and "commitment" in first["sealed"]["/key_secret"]
    record = AccessRecord.objects.get(run_id="run-acme", front_end="export")
    assert record.all_fields and record.actor_name == "carol" and record.why == "audit 7"
    access = [json.loads(x) for x in (out / "access.jsonl").read_text().splitlines()]
    assert access[-1]["front_end"] == "export" and access[-1]["why"] == "audit 7"


def test_tampering_with_a_masked_bundle_is_named(seeded, tmp_path):
    out, _ = _export(tmp_path)
    files = {f.name: f.read_bytes() for f in out.iterdir()}
    lines = files["events.jsonl"].decode().splitlines()
    i = next(n for n, ln in enumerate(lines) if '"tool_call_started"' in ln)

    def check(new_line: str) -> str:
        changed = dict(files, **{"events.jsonl": ("\n".join([*lines[:i], new_line, *lines[i + 1 :]]) + "\n").encode()})
        with pytest.raises(Problem) as err:
            files_verify(changed)
        return str(err.value)

    seq = json.loads(lines[i])["seq"]
    # A shown value changed.
    assert check(lines[i].replace('"840.00"', '"841.00"')) == f"line {i + 1}: hash mismatch (seq {seq})"
    # A commitment changed.
    ev = json.loads(lines[i])
    c = ev["sealed"]["/arguments/account"]["commitment"]
    ev["sealed"]["/arguments/account"]["commitment"] = ("0" if c[0] != "0" else "1") + c[1:]
    assert check(json.dumps(ev)) == f"line {i + 1}: hash mismatch (seq {seq})"
    # A masked value "unmasked" with a guess and a made-up salt.
    ev = json.loads(lines[i])
    ev["payload"]["arguments"]["account"] = "ACCT-GUESS-0001"
    ev["sealed"]["/arguments/account"] = {"salt": "00" * 16}
    assert check(json.dumps(ev)) == f"line {i + 1}: hash mismatch (seq {seq})"
    # A shown event passed off as withheld, with its own hash: the manifest signed no hash before it.
    shown = {"seq": seq, "withheld": "sensitive values outside the sealed ones", "hash": json.loads(lines[i])["hash"]}
    assert check(json.dumps(shown)) == f"line {i + 1}: hash mismatch before withheld seq {seq}"
    # A withheld event's hash changed: the event after it no longer links to it.
    j = next(n for n, ln in enumerate(lines) if '"withheld"' in ln)
    ev = json.loads(lines[j])
    assert set(ev) == {"seq", "withheld", "hash"}  # chain v3: nothing of the event but its hash
    ev["hash"] = "00" * 32
    i = j
    if j + 1 == len(lines):
        named = "manifest head differs"
    elif '"withheld"' in lines[j + 1]:  # withheld too: what no longer matches is the signed hash before it
        named = f"line {j + 2}: hash mismatch before withheld seq {ev['seq'] + 1}"
    else:
        named = f"line {j + 2}: hash mismatch (seq {ev['seq'] + 1})"
    assert check(json.dumps(ev)) == named


def test_events_rewritten_before_a_withheld_one_are_named_though_every_hash_was_recomputed(seeded, tmp_path):
    # Whoever holds a masked bundle can recompute the hashes of the events they change, up to a
    # withheld event, whose own hash they cannot: the hash before it is in the signed manifest.
    from runs.verify import _commitments, event_link, genesis, sealed_event_canonical

    out, _ = _export(tmp_path)
    files = {f.name: f.read_bytes() for f in out.iterdir()}
    lines = [json.loads(x) for x in files["events.jsonl"].decode().splitlines()]
    j = next(n for n, ln in enumerate(lines) if "withheld" in ln)
    assert j > 1
    lines[1]["payload"]["content"] = "Post correction C-902 for tenant acme."
    prev = genesis("run-acme")
    for n, ln in enumerate(lines[:j], start=1):
        canon = sealed_event_canonical(seq=ln["seq"], type=ln["type"], ts=ln["ts"], v=ln["v"], payload=ln["payload"], commitments=_commitments(ln, n))
        prev = event_link(prev, ln["seq"], canon)
        ln["hash"] = prev.hex()
    forged = dict(files, **{"events.jsonl": "".join(json.dumps(ln) + "\n" for ln in lines).encode()})
    with pytest.raises(Problem, match=f"^line {j + 1}: hash mismatch before withheld seq {lines[j]['seq']}$"):
        files_verify(forged)


def _access_sql(sql, params):
    with connection.cursor() as cur:
        if connection.vendor == "postgresql":
            cur.execute("ALTER TABLE reckon_access_record DISABLE TRIGGER reckon_access_record_append_only")
            cur.execute(sql, params)
            cur.execute("ALTER TABLE reckon_access_record ENABLE TRIGGER reckon_access_record_append_only")
        else:  # SQLite: drop the two triggers for the statement, then put them back as migrated
            import importlib

            migration = importlib.import_module("access.migrations.0002_access_record")
            for drop in migration.SQLITE_BACKWARD:
                cur.execute(drop)
            cur.execute(sql, params)
            for create in migration.SQLITE_FORWARD:
                cur.execute(create)


def _verify_chain(run_id: str) -> list[dict]:
    buf = StringIO()
    old, sys.stdout = sys.stdout, buf
    try:
        with pytest.raises(CommandError):
            call_command("verify_chain", run_id, "--json")
    finally:
        sys.stdout = old
    return [json.loads(x) for x in buf.getvalue().splitlines()]


def test_who_saw_what_cannot_be_quietly_edited_or_removed(seeded, tmp_path):
    out, _ = _export(tmp_path, "--unmasked", "--reason", "first")
    _export(tmp_path, "--unmasked", "--reason", "second")
    call_command("verify_chain", "run-acme", stdout=StringIO())  # untouched: passes
    first = AccessRecord.objects.filter(run_id="run-acme", why="first").values_list("id", flat=True).get()
    # The bundle's own access records: one changed line is named.
    access = (out / "access.jsonl").read_text().splitlines()
    (out / "access.jsonl").write_text(access[0].replace('"first"', '"nothing to see"') + "\n")
    with pytest.raises(Problem, match=r"access.jsonl line 1: hash mismatch \(record 1\)"):
        bundle_verify(out)
    # In the database: a reason edited, then a record deleted.
    _access_sql("UPDATE reckon_access_record SET why = %s WHERE id = %s", ["routine", first])
    (problem,) = _verify_chain("run-acme")
    assert problem["problem"] == "access record changed" and "access record 1" in problem["detail"]
    _access_sql("DELETE FROM reckon_access_record WHERE id = %s", [first])
    (problem,) = _verify_chain("run-acme")
    assert problem["problem"] == "access record missing"


def test_a_checkpoint_reveals_access_records_removed_from_the_end_with_the_head_rewritten(seeded, tmp_path):
    from access.models import AccessHead
    from evidence.signing import checkpoint_write

    _export(tmp_path, "--unmasked", "--reason", "first")
    path = checkpoint_write(folder=tmp_path / "cp")
    assert json.loads(path.read_text())["runs"][0]["access_count"] >= 1
    call_command("verify_chain", "run-acme", "--checkpoint", str(path), stdout=StringIO())
    # Someone with the database removes the last record and rewinds the head to match: the chain
    # alone is consistent again, the checkpoint is not.
    last = AccessRecord.objects.filter(run_id="run-acme").order_by("-id").first()
    _access_sql("DELETE FROM reckon_access_record WHERE id = %s", [last.pk])
    from access.chain import access_rows

    rows = access_rows("run-acme")
    with connection.cursor() as cur:
        cur.execute("DELETE FROM reckon_access_chain WHERE record_id = %s", [last.pk])
    AccessHead.objects.filter(run_id="run-acme").update(count=len(rows), head=rows[-1][1] if rows else None)
    buf = StringIO()
    old, sys.stdout = sys.stdout, buf
    try:
        call_command("verify_chain", "run-acme", "--json")  # consistent without the checkpoint
        with pytest.raises(CommandError):
            call_command("verify_chain", "run-acme", "--checkpoint", str(path), "--json")
    finally:
        sys.stdout = old
    result = json.loads(buf.getvalue().splitlines()[-1])
    assert result["problem"] == "access rolled back"


def test_text_quoting_a_sealed_value_of_the_same_payload_is_sealed_whole():
    from runs.canonical import seal_pointers

    turn = {
        "text": "Ledger 4010 is consistent. Reading 4020.",
        "tool_calls": [{"id": "c2", "name": "read_ledger", "arguments": {"tenant": "acme", "account": "4020", "period": "2026-Q3"}}],
        "usage": {"input_tokens": 1650, "output_tokens": 70},
    }
    assert seal_pointers(turn, frozenset({"account"})) == ["/tool_calls/0/arguments/account", "/text"]
    # Nothing sealed, nothing quoted: nothing else is sealed either.
    assert seal_pointers({"text": "Reading 4020", "n": 4020}, frozenset({"account"})) == []
    started = {"arguments": {"account": "A/1", "note": None}, "signature": 'post:{"account":"A/1"}', "other": {"account": None}}
    assert seal_pointers(started, frozenset({"account"})) == ["/arguments/account", "/signature"]
