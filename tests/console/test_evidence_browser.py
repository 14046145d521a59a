"""A compliance reviewer downloads a run's evidence bundle from the run screen in Chromium, and the
standalone verifier, in a process that cannot import Django, accepts it."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

from tests.access.seed import SECRET, seed_runs
from tests.console.browser import CHROMIUM, shot, signed_in

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is absent (apt-get install chromium)"),
]
VERIFY = Path(sys.executable).parent / "reckon-verify"


def _verify(path: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    # A module named django first on the path that refuses to load: the verifier must not need it.
    stub = tmp_path / "no-django"
    stub.mkdir(exist_ok=True)
    (stub / "django.py").write_text("raise ImportError('Django is not available to the verifier')\n")
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(stub)}
    check = subprocess.run([str(VERIFY), "--help"], env=env, capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stderr
    probe = subprocess.run([sys.executable, "-c", "import django"], env=env, capture_output=True, text=True, check=False)
    assert probe.returncode != 0 and "not available" in probe.stderr  # the environment really cannot
    return subprocess.run([str(VERIFY), str(path)], env=env, capture_output=True, text=True, check=False, cwd=tmp_path)


def test_a_compliance_reviewer_downloads_bundles_and_reckon_verify_accepts_them(live_server, page, compliance, settings, tmp_path):
    from access.models import AccessRecord
    from runs.models import Run

    settings.RECKON_SIGNING_KEY = Ed25519PrivateKey.generate().private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode()
    seed_runs()
    page.set_viewport_size({"width": 1280, "height": 800})
    signed_in(page, live_server, compliance, "/runs/run-acme/")
    page.locator("section[aria-labelledby='export-h']").screenshot(path=str(shot(page, "evidence-run-1280").with_name("evidence-form-1280.png")))

    # Masked by default.
    with page.expect_download() as dl:
        page.click("button:has-text('Download evidence bundle')")
    assert dl.value.suggested_filename == "evidence-run-acme-masked.zip"
    masked = tmp_path / "masked.zip"
    dl.value.save_as(masked)
    with zipfile.ZipFile(masked) as zf:
        names = sorted(n.rsplit("/", 1)[-1] for n in zf.namelist())
        assert names == ["access.jsonl", "decisions.jsonl", "events.jsonl", "manifest.json", "public_key.pem", "report.html"]
        assert not any(SECRET.encode() in zf.read(n) for n in zf.namelist())
    head = bytes(Run.objects.get(run_id="run-acme").head).hex()
    last = Run.objects.get(run_id="run-acme").last_seq
    proc = _verify(masked, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == f"verified: run-acme seq 1..{last} head {head}"
    assert not AccessRecord.objects.filter(run_id="run-acme", front_end="export").exists()

    # Unmasked needs a reason; with one it is recorded, and the bundle holds that record.
    page.check("input[name='unmasked'][value='1']")
    page.fill("#evidence-reason", "quarterly audit AC-2026-11")
    with page.expect_download() as dl:
        page.click("button:has-text('Download evidence bundle')")
    unmasked = tmp_path / "unmasked.zip"
    dl.value.save_as(unmasked)
    with zipfile.ZipFile(unmasked) as zf:
        events = next(zf.read(n) for n in zf.namelist() if n.endswith("events.jsonl"))
        access = next(zf.read(n) for n in zf.namelist() if n.endswith("access.jsonl"))
        report = next(zf.read(n) for n in zf.namelist() if n.endswith("report.html"))
    assert SECRET.encode() in events and b"quarterly audit AC-2026-11" in access
    assert b"<script" not in report and b"http://" not in report and b"https://" not in report
    proc = _verify(unmasked, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert AccessRecord.objects.filter(run_id="run-acme", front_end="export", actor_name="colin.compliance").count() == 1

    # The report opens offline; and the run screen on a phone.
    report_path = tmp_path / "report.html"
    report_path.write_bytes(report)
    page.goto(report_path.as_uri())
    assert "verified: run-acme" in page.inner_text("main")
    page.screenshot(path=str(shot(page, "evidence-report-full-1280").with_name("evidence-report-1280.png")))
    page.set_viewport_size({"width": 390, "height": 800})
    page.screenshot(path=str(shot(page, "evidence-report-full-390").with_name("evidence-report-390.png")))
    assert page.evaluate("document.documentElement.scrollWidth") <= 390  # nothing wider than a phone
    page.goto(f"{live_server.url}/runs/run-acme/")
    page.locator("section[aria-labelledby='export-h']").screenshot(path=str(shot(page, "evidence-run-390").with_name("evidence-form-390.png")))


def test_an_unmasked_bundle_without_a_reason_is_refused_and_nothing_is_recorded(client, compliance, settings):
    from access.models import AccessRecord

    settings.RECKON_SIGNING_KEY = Ed25519PrivateKey.generate().private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode()
    seed_runs()
    client.force_login(compliance)
    r = client.post("/runs/run-acme/evidence.zip", {"unmasked": "1", "reason": " "})
    assert r.status_code == 400 and b"needs a reason" in r.content
    assert not AccessRecord.objects.filter(front_end="export").exists()
    assert client.post("/runs/no-such-run/evidence.zip").status_code == 404
    # No signing key configured (DEBUG off): the server says so, it is not the request's fault.
    settings.RECKON_SIGNING_KEY = ""
    r = client.post("/runs/run-acme/evidence.zip")
    assert r.status_code == 503 and b"RECKON_SIGNING_KEY" in r.content
