import hashlib
import json
import re

from tests.console.helpers import client_for


def test_the_run_list_names_every_imported_run(oncall, v1_runs):
    body = client_for(oncall).get("/runs/").content.decode()
    for run_id in v1_runs:
        assert run_id in body


def test_the_audit_timeline_shows_record_only_events_and_filters_by_type(compliance, v1_runs):
    c = client_for(compliance)
    body = c.get("/runs/run-regulator-notice/").content.decode()
    assert "guardrail_triggered" in body and "record-only" in body
    assert "approval_decided" in body and "Reviewed with legal" in body
    only = c.get("/runs/run-regulator-notice/", {"type": "guardrail_triggered"}).content.decode()
    assert 'id="ev-6"' in only and 'id="ev-5"' not in only


def test_a_long_run_pages_from_the_newest_events_and_loads_older_ones(compliance, v1_runs):
    from console import selectors

    page = selectors.run_events_page(run_id="run-support-compaction", limit=5)
    assert [e.seq for e in page.items] == [17, 16, 15, 14, 13] and page.next_cursor == 13
    c = client_for(compliance)
    older = c.get("/runs/run-support-compaction/", {"before": 13}, HTTP_HX_REQUEST="true").content.decode()
    assert 'id="ev-12"' in older and 'id="ev-13"' not in older and "<html" not in older


def test_the_folded_state_is_shown_at_any_seq(compliance, v1_runs):
    c = client_for(compliance)
    body = c.get("/runs/run-regulator-notice/", {"at": 8}).content.decode()
    assert "State after seq <strong>8</strong>" in body
    part = c.get("/runs/run-regulator-notice/state/", {"at": 14}, HTTP_HX_REQUEST="true").content.decode()
    assert "status <strong>finished</strong>" in part or "finished" in part
    assert c.get("/runs/run-regulator-notice/", {"at": "x"}).status_code == 400


def test_the_jsonl_export_is_the_reference_format_streamed_with_a_link_to_its_digest(compliance, v1_runs, tmp_path, settings):
    settings.RECKON_READ_CHUNK = 4  # the 11 events leave in several pieces
    c = client_for(compliance)
    resp = c.get("/runs/run-q3-recon/export.jsonl")
    assert resp.status_code == 200 and resp.streaming
    pieces = list(resp.streaming_content)
    body = b"".join(pieces)
    assert len(pieces) == 3
    lines = [json.loads(line) for line in body.decode().splitlines()]
    assert [d["seq"] for d in lines] == list(range(1, 12))
    assert resp["X-Reckon-Upto"] == "11"
    assert resp["Link"] == '</runs/run-q3-recon/export.jsonl.sha256?upto=11>; rel="digest"'
    digest = c.get("/runs/run-q3-recon/export.jsonl.sha256", {"upto": 11}).content.decode()
    assert digest == f"{hashlib.sha256(body).hexdigest()}  run-q3-recon.jsonl\n"
    assert c.get("/runs/run-q3-recon/export.jsonl.sha256").content.decode() == digest  # the whole run, as it is now
    first4 = b"".join(c.get("/runs/run-q3-recon/export.jsonl", {"upto": 4}).streaming_content)
    assert first4 == b"".join(body.splitlines(keepends=True)[:4])
    assert c.get("/runs/run-q3-recon/export.jsonl.sha256", {"upto": 4}).content.decode().split()[0] == hashlib.sha256(first4).hexdigest()
    for bad in ("12", "x", "-1"):
        assert c.get("/runs/run-q3-recon/export.jsonl", {"upto": bad}).status_code == 400
    csv_resp = c.get("/runs/run-q3-recon/export.csv")
    csv_body = b"".join(csv_resp.streaming_content)
    assert csv_body.decode().splitlines()[0] == "seq,type,ts,v,record_only,payload" and len(csv_body.decode().splitlines()) == 12
    assert c.get(csv_resp["Link"].split(";")[0].strip("<>")).content.decode().split()[0] == hashlib.sha256(csv_body).hexdigest()


def test_an_exported_run_imports_again_unchanged(compliance, v1_runs, tmp_path):
    from runs.importer import paths_import

    body = b"".join(client_for(compliance).get("/runs/run-q3-recon/export.jsonl").streaming_content)
    path = tmp_path / "run-q3-recon.jsonl"
    path.write_bytes(body)
    [result] = paths_import([str(path)])
    assert result.outcome == "unchanged", result.line()


def test_an_unknown_run_or_export_format_is_a_404(compliance, v1_runs):
    c = client_for(compliance)
    assert c.get("/runs/no-such-run/").status_code == 404
    assert c.get("/runs/run-q3-recon/export.xml").status_code == 404


def test_the_run_page_shows_the_stale_observations_a_resumption_found(oncall, v1_runs):
    from runs.importer import paths_import

    from tests.console.helpers import FIXTURES

    assert [r.outcome for r in paths_import([str(FIXTURES / "events" / "v4" / "run-v4-stale-read.jsonl")])] == ["imported"]
    body = client_for(oncall).get("/runs/run-v4-stale-read/").content.decode()
    assert "Stale observations" in body and "Resumed at seq 5" in body
    assert "<td>read_ledger</td><td>2026-11-30T09:00:12Z</td><td>4</td><td>3600 s</td>" in body
    assert "Stale observations" not in client_for(oncall).get(f"/runs/{v1_runs[0]}/").content.decode()


def test_the_run_screens_export_and_its_sha256_link_agree_after_the_run_grows_and_name_only_headers_sent(compliance, conflict_call):
    import re

    c = client_for(compliance)
    page = c.get("/runs/run-conflict/").content.decode()
    export = re.search(r'<section class="panel" aria-labelledby="export-h">(.*?)</form>', page, re.S).group(1)
    for fmt in ("jsonl", "csv"):
        file_href = re.search(rf'href="(/runs/run-conflict/export\.{fmt}[^"]*)" download', export).group(1).replace("&amp;", "&")
        digest_href = re.search(rf'href="(/runs/run-conflict/export\.{fmt}\.sha256[^"]*)"', export).group(1).replace("&amp;", "&")
        resp = c.get(file_href)
        body = b"".join(resp.streaming_content)
        # The run grows between the download and the click on its sha256 link (a note is an event).
        assert c.post(f"/calls/{conflict_call.pk}/note/", {"text": f"checked the {fmt} export"}).status_code == 302
        assert c.get(digest_href).content.decode().split()[0] == hashlib.sha256(body).hexdigest(), fmt
        # Every header the page tells the reviewer to read is one the download carries.
        named = re.findall(r"<code>([A-Z][A-Za-z-]+)</code>", export)
        assert named and all(h in resp.headers for h in named), (named, dict(resp.headers))


def test_an_unmasked_evidence_bundle_without_a_reason_shows_the_run_screen_again_with_the_message_at_the_reason(compliance, conflict_call):
    from html import unescape

    from access.models import AccessRecord

    c = client_for(compliance)
    resp = c.post("/runs/run-conflict/evidence.zip", {"unmasked": "1", "reason": "  "})
    body = resp.content.decode()
    assert resp.status_code == 400 and resp["Content-Type"].startswith("text/html")
    # The run screen itself, not the bare error page: its heading, its facts and its export links.
    assert '<h1>Run <span class="mono">run-conflict</span></h1>' in body and "Bad request" not in body and 'id="facts-h"' in body
    field = re.search(r'<input type="text" id="evidence-reason"[^>]*>', body).group(0)
    # Focused on arrival, so on a narrow screen the page opens at the field to fill in.
    assert 'aria-invalid="true"' in field and 'aria-describedby="evidence-reason-error"' in field and "autofocus" in field
    error = re.search(r'<[^>]+id="evidence-reason-error"[^>]*>(.*?)</', body, re.S).group(1)
    assert "needs a reason" in error and "unmasked" in error
    # The choice made is kept: unmasked stays ticked, masked does not.
    assert re.search(r'<input type="radio" name="unmasked" value="1" checked', body)
    assert not re.search(r'<input type="radio" name="unmasked" value="0" checked', body)
    # A reason too long for the record is refused the same way, and what was typed is kept.
    long = "audit " * 100
    resp = c.post("/runs/run-conflict/evidence.zip", {"unmasked": "1", "reason": long})
    body = unescape(resp.content.decode())
    assert resp.status_code == 400 and f'value="{long.strip()}"' in body and "at most 500 characters" in body
    assert not AccessRecord.objects.filter(front_end="export").exists()


def test_the_run_screen_counts_only_the_calls_still_in_doubt_as_the_runs_list_does(oncall, conflict_call):
    from recovery.decisions import decision_record

    client = client_for(oncall)
    assert "1 call in doubt" in client.get("/runs/run-conflict/").text
    decision_record(pk=conflict_call.pk, decision="not_happened", by=oncall, reason="reversed by the ledger team", seen_version=conflict_call.version)
    status = client.get("/runs/run-conflict/").text.split('id="run-status"')[1].split("</dd>")[0]
    assert "no call in doubt" in status and "1 resolved, listed below" in status and "uncertain or in flight" not in status
