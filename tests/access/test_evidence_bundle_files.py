"""Every file of an evidence bundle is bound to its signed manifest, and a hostile bundle is refused in
one line, with memory bounded: the real ``reckon-verify`` command (a subprocess) on real bundles
written by ``export_evidence``, then tampered with: a changed report.html or decisions.jsonl, a file
added or removed, JSON nested too deeply, a zip bomb, ``../`` and duplicate member names, a FIFO or
``/dev/zero`` standing in for a file. An older bundle (its manifest lists no files) still verifies
what its chain covers and says which files nothing binds."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat
from django.core.management import call_command

from evidence.signing import document_sign
from runs.verify import files_digests
from tests.access.seed import seed_runs

pytestmark = pytest.mark.django_db(transaction=True)
KEY = Ed25519PrivateKey.generate()
ROOT = Path(__file__).resolve().parents[2]
VERIFY = Path(sys.executable).parent / "reckon-verify"
# The console script imports runs.verify: from this checkout, not from wherever the package was installed.
ENV = {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT)}


@pytest.fixture(autouse=True)
def _key(settings):
    settings.RECKON_SIGNING_KEY = KEY.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode()


@pytest.fixture
def bundle(tmp_path) -> Path:
    seed_runs()
    out = tmp_path / "evidence-run-acme-masked"
    call_command("export_evidence", "run-acme", "--out", str(out), "--by", "carol", stdout=io.StringIO())
    return out


def verify(path: Path, *args: str, timeout: float = 60) -> tuple[int, str, str]:
    proc = subprocess.run([str(VERIFY), str(path), *args], env=ENV, capture_output=True, text=True, timeout=timeout, check=False)
    return proc.returncode, proc.stdout.strip(), proc.stderr.strip()


def refused(path: Path, *args: str, code: int | None = None) -> str:
    """The one line ``reckon-verify`` refuses ``path`` with (stdout for a bundle that does not
    verify, stderr for one that cannot be read safely), having checked it is one line, no traceback."""
    rc, out, err = verify(path, *args)
    assert rc != 0, (out, err)
    if code is not None:
        assert rc == code, (rc, out, err)
    said = out or err
    assert "Traceback" not in out + err and "\n" not in said and not (out and err), (out, err)
    return said


def zipped(folder: Path, dest: Path, members: list[tuple[str, bytes]] | None = None) -> Path:
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members if members is not None else [(f"{folder.name}/{f.name}", f.read_bytes()) for f in sorted(folder.iterdir())]:
            zf.writestr(name, data)
    return dest


def resign(folder: Path, change) -> None:
    manifest = json.loads((folder / "manifest.json").read_text())
    body = change({k: v for k, v in manifest.items() if k not in ("signature", "key_fingerprint")})
    (folder / "manifest.json").write_text(json.dumps(document_sign(key=KEY, doc=body), indent=1))


# --- every file bound to the signed manifest ------------------------------------------------------


def test_the_manifest_lists_every_other_file_with_its_sha256_and_the_bundle_verifies(bundle, tmp_path):
    import hashlib

    manifest = json.loads((bundle / "manifest.json").read_text())
    names = sorted(f.name for f in bundle.iterdir() if f.name != "manifest.json")
    assert sorted(manifest["files"]) == names == ["access.jsonl", "decisions.jsonl", "events.jsonl", "public_key.pem", "report.html"]
    for name in names:
        assert manifest["files"][name] == hashlib.sha256((bundle / name).read_bytes()).hexdigest()
    rc, out, err = verify(bundle)
    assert (rc, err) == (0, "") and out.startswith("verified: run-acme seq 1..")
    assert verify(zipped(bundle, tmp_path / "b.zip"))[:2] == (0, out)


@pytest.mark.parametrize("name", ["report.html", "decisions.jsonl", "public_key.pem"])
def test_a_changed_file_is_named_in_the_folder_and_in_the_zip(bundle, tmp_path, name):
    data = (bundle / name).read_bytes()
    changed = data.replace(b"run-acme", b"run-acmf", 1) if b"run-acme" in data else data + b"\n"
    (bundle / name).write_bytes(changed)
    said = refused(bundle, code=1)
    assert said == f"{name}: sha256 differs from the signed manifest's (changed after signing)"
    assert refused(zipped(bundle, tmp_path / "b.zip"), code=1) == said


def test_events_jsonl_changed_where_the_chain_cannot_see_is_refused(bundle):
    # Another key order, spacing, or a key the chain does not read: the same events to the chain.
    events = bundle / "events.jsonl"
    lines = events.read_text().splitlines()
    first = json.loads(lines[0])
    events.write_text("\n".join([json.dumps({**first, "note": "verified by audit"}, indent=None), *lines[1:]]) + "\n")
    assert refused(bundle, code=1) == "events.jsonl: sha256 differs from the signed manifest's (changed after signing)"


def test_report_html_changed_in_its_words_only_is_refused(bundle):
    report = bundle / "report.html"
    report.write_text(report.read_text().replace("Verification when exported", "Verification (all fine) when exported"))
    assert refused(bundle, code=1).startswith("report.html: sha256 differs")


def test_a_file_added_or_removed_is_refused(bundle, tmp_path):
    (bundle / "notes.txt").write_text("looks fine to me\n")
    assert refused(bundle, code=1) == "notes.txt: in the bundle but not listed in the signed manifest"
    (bundle / "notes.txt").unlink()
    (bundle / "decisions.jsonl").unlink()
    assert refused(bundle, code=1) == "decisions.jsonl missing from the bundle"
    assert refused(zipped(bundle, tmp_path / "b.zip"), code=1) == "decisions.jsonl missing from the bundle"


def test_a_manifest_files_entry_that_is_malformed_is_named(bundle):
    resign(bundle, lambda m: {**m, "files": {**m["files"], "../etc/passwd": "00" * 32}})
    assert refused(bundle, code=1) == 'manifest files: "../etc/passwd" is not a file name of a bundle'
    resign(bundle, lambda m: {**m, "files": {k: v for k, v in m["files"].items() if k not in ("events.jsonl", "../etc/passwd")}})
    assert refused(bundle, code=1) == "events.jsonl: in the bundle but not listed in the signed manifest"
    resign(bundle, lambda m: {**m, "files": ["report.html"]})
    assert refused(bundle, code=1) == "manifest files is not an object of file names to sha256 hex"


def test_an_older_bundle_verifies_what_its_chain_covers_and_warns_of_the_unbound_files(bundle):
    # What a bundle exported before manifests listed their files looks like: the same, without files.
    resign(bundle, lambda m: {k: v for k, v in m.items() if k != "files"})
    rc, out, err = verify(bundle)
    assert rc == 0 and out.startswith("verified: run-acme seq 1..")
    assert err == "reckon-verify: warning: report.html is not bound to the signature (the manifest, written before bundles listed their files, does not cover it)"
    # decisions.jsonl is checked line by line against events.jsonl, which the chain binds.
    lines = (bundle / "decisions.jsonl").read_text().splitlines()
    assert lines
    forged = json.loads(lines[-1])
    forged["payload"]["reason"] = "forged"
    (bundle / "decisions.jsonl").write_text("\n".join([*lines[:-1], json.dumps(forged)]) + "\n")
    assert refused(bundle, code=1) == f"decisions.jsonl line {len(lines)}: not a line of events.jsonl"
    (bundle / "decisions.jsonl").write_text("\n".join(lines) + "\n")
    (bundle / "notes.txt").write_text("x")
    assert refused(bundle, code=1) == "notes.txt: not a file of an evidence bundle"


# --- hostile bundles ------------------------------------------------------------------------------


def test_json_nested_too_deeply_is_one_line_in_events_and_in_the_manifest(bundle):
    events = bundle / "events.jsonl"
    lines = events.read_text().splitlines()
    for depth in (300, 100_000):
        events.write_text("\n".join([lines[0], '{"seq": 2, "payload": ' + "[" * depth + "]" * depth + "}", *lines[2:]]) + "\n")
        assert refused(bundle, code=1) == "line 2: not JSON (nested deeper than 256)"
        # Signed as it is, by whoever holds the key: the same.
        resign(bundle, lambda m: {**m, "files": files_digests({f.name: f.read_bytes() for f in bundle.iterdir()})})
        assert refused(bundle, code=1) == "line 2: not JSON (nested deeper than 256)"
    events.write_text("\n".join(lines) + "\n")
    manifest = (bundle / "manifest.json").read_text()
    (bundle / "manifest.json").write_text(manifest.replace('"masked":', '"x": ' + "{\"a\": " * 100_000 + "1" + "}" * 100_000 + ', "masked":', 1))
    assert refused(bundle, code=1) == "manifest.json: not JSON (nested deeper than 256)"


def test_duplicate_keys_in_the_manifest_are_refused(bundle):
    manifest = (bundle / "manifest.json").read_text()
    (bundle / "manifest.json").write_text(manifest.replace('"masked": true', '"masked": true, "masked": false', 1))
    assert refused(bundle, code=1) == "manifest.json: not JSON (masked appears twice in one object)"


def _peak_rss_kb(path: Path, *args: str) -> tuple[int, str, int]:
    """reckon-verify's exit status, stderr and peak resident memory (KiB), measured by a parent of its own."""
    driver = (
        "import resource, subprocess, sys\n"
        "p = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
        "print(p.returncode); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); print(p.stderr.strip())\n"
    )
    proc = subprocess.run([sys.executable, "-c", driver, str(VERIFY), str(path), *args], env=ENV, capture_output=True, text=True, timeout=120, check=True)
    rc, rss, err = proc.stdout.split("\n", 2)
    return int(rc), err.strip(), int(rss)


def _bomb(dest: Path, folder: Path, name: str, size: int, *, declared: int | None = None) -> Path:
    """The bundle zipped with ``name`` replaced by ``size`` zero bytes (deflated to about a
    thousandth); with ``declared``, the central directory claims that size instead."""
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as zf:
        for f in sorted(folder.iterdir()):
            if f.name != name:
                zf.writestr(f"b/{f.name}", f.read_bytes())
        with zf.open(f"b/{name}", "w", force_zip64=True) as w:
            block = b"\0" * (1 << 20)
            for _ in range(size >> 20):
                w.write(block)
    if declared is not None:
        data = bytearray(dest.read_bytes())
        # The last central directory entry (the bomb's): its uncompressed size, 4 bytes at offset 24.
        cd = data.rfind(b"PK\x01\x02")
        data[cd + 24 : cd + 28] = declared.to_bytes(4, "little")
        dest.write_bytes(bytes(data))
    return dest


def test_a_zip_bomb_is_refused_before_it_is_inflated(bundle, tmp_path):
    bomb = _bomb(tmp_path / "bomb.zip", bundle, "events.jsonl", 300 << 20)
    assert bomb.stat().st_size < 400_000
    rc, err, rss = _peak_rss_kb(bomb)
    assert rc == 2 and err == f"reckon-verify: {bomb}: member b/events.jsonl: {300 << 20} bytes inflated, over the limit of {256 << 20} per file (--max-file-bytes)"
    assert rss < 120_000, f"peak {rss} KiB"


def test_a_zip_whose_sizes_lie_is_refused_with_memory_bounded(bundle, tmp_path):
    bomb = _bomb(tmp_path / "liar.zip", bundle, "events.jsonl", 300 << 20, declared=1000)
    rc, err, rss = _peak_rss_kb(bomb)
    assert rc == 2 and err.startswith(f"reckon-verify: {bomb}: member b/events.jsonl: cannot be read: "), err
    assert rss < 120_000, f"peak {rss} KiB"


def test_the_size_limits_are_named_and_can_be_set(bundle, tmp_path):
    total = sum(f.stat().st_size for f in bundle.iterdir())
    biggest = max(bundle.iterdir(), key=lambda f: f.stat().st_size)
    assert refused(bundle, "--max-bundle-bytes", str(total - 1), code=2).endswith(f"files of {total} bytes in all, over the limit of {total - 1} (--max-bundle-bytes)")
    said = refused(bundle, "--max-file-bytes", str(biggest.stat().st_size - 1), code=2)
    assert said == f"reckon-verify: {bundle / biggest.name}: {biggest.stat().st_size} bytes, over the limit of {biggest.stat().st_size - 1} per file (--max-file-bytes)"
    assert verify(zipped(bundle, tmp_path / "b.zip"), "--max-bundle-bytes", str(total))[0] == 0


@pytest.mark.parametrize(
    "member, named",
    [
        ("../events.jsonl", 'member "../events.jsonl": a path outside the bundle\'s folder'),
        ("b/../../x.txt", 'member "b/../../x.txt": a path outside the bundle\'s folder'),
        ("/etc/report.html", 'member "/etc/report.html": a path outside the bundle\'s folder'),
        ("b\\..\\x.txt", 'member "b\\\\..\\\\x.txt": a path outside the bundle\'s folder'),
        ("b/c/report.html", 'member "b/c/report.html": deeper than one folder'),
        ("other/report.html", 'member "other/report.html": in another folder than "b/"'),
        ("b/report.html", 'member "b/report.html" appears twice'),
        ("b/evil\nverified: run-acme", 'member "b/evil\\nverified: run-acme": not a file of an evidence bundle'),
    ],
)
def test_member_names_outside_the_folder_or_repeated_are_refused(bundle, tmp_path, member, named):
    members = [(f"b/{f.name}", f.read_bytes()) for f in sorted(bundle.iterdir())]
    dest = tmp_path / "b.zip"
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns of the duplicate name it is asked to write
        zipped(bundle, dest, [*members, (member, b"<p>verified</p>")])
    assert refused(dest, code=2) == f"reckon-verify: {dest}: {named}"


def test_a_fifo_or_dev_zero_in_place_of_a_file_is_refused_without_hanging(bundle, tmp_path):
    (bundle / "report.html").unlink()
    (bundle / "report.html").symlink_to("/dev/zero")
    assert refused(bundle, code=2) == f"reckon-verify: {bundle / 'report.html'}: not a regular file (a character device)"
    (bundle / "report.html").unlink()
    os.mkfifo(bundle / "report.html")
    assert refused(bundle, code=2) == f"reckon-verify: {bundle / 'report.html'}: not a regular file (a named pipe)"
    fifo = tmp_path / "bundle.zip"
    os.mkfifo(fifo)
    assert refused(fifo, code=2) == f"reckon-verify: {fifo}: not a regular file (a named pipe)"
    assert refused(Path("/dev/zero"), code=2) == "reckon-verify: /dev/zero: not a regular file (a character device)"
