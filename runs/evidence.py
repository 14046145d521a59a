"""An evidence bundle of one run (CONTRACTS section 9, docs/evidence.md), checked offline by
``reckon-verify`` (runs/verify.py)."""

from __future__ import annotations

import html
import json
from datetime import UTC, datetime
from pathlib import Path

from runs.chain import chain_rows
from runs.errors import RunNotFound
from runs.models import Run
from runs.signing import document_sign, public_pem, signing_key_load
from runs.verify import ENCODING, bundle_verify, ts_text

DECISION_TYPES = frozenset({"approval_decided", "tool_call_resolved"})


def evidence_export(*, run_id: str, out: Path, exported_by: str) -> str:
    """Write the run's bundle into ``out`` (created; files in it replaced) and verify it as a
    reviewer would; the verifier's ``verified: ...`` line. RunNotFound; ValueError for a run whose
    chain cannot be exported (not yet chained)."""
    run = Run.objects.filter(run_id=run_id).values("last_seq", "head").first()
    if run is None:
        raise RunNotFound(run_id)
    lines, decisions = [], []
    last = 0
    head = None
    for seq, type_, v, ts, payload, stored in chain_rows(run_id):
        if stored is None:
            raise ValueError(f"run {run_id!r} seq {seq} has no chain hash: run manage.py chain_backfill first")
        line = {"seq": seq, "type": type_, "ts": ts_text(ts), "v": v, "payload": payload, "hash": stored.hex()}
        lines.append(json.dumps(line, ensure_ascii=False, separators=(",", ":")))
        if type_ in DECISION_TYPES:
            decisions.append(json.dumps({"seq": seq, "type": type_, "ts": line["ts"], "payload": payload}, ensure_ascii=False))
        last, head = seq, stored
    if last == 0:
        raise ValueError(f"run {run_id!r} has no events to export")
    key = signing_key_load()
    manifest = document_sign(
        key=key,
        doc={
            "run_id": run_id,
            "first_seq": 1,
            "last_seq": last,
            "head": head.hex(),
            "encoding": ENCODING,
            "exported_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "exported_by": exported_by,
        },
    )
    out.mkdir(parents=True, exist_ok=True)
    (out / "events.jsonl").write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    (out / "decisions.jsonl").write_text("".join(x + "\n" for x in decisions), encoding="utf-8")
    (out / "access.jsonl").write_text("", encoding="utf-8")
    (out / "public_key.pem").write_bytes(public_pem(key))
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    result = bundle_verify(out)
    (out / "report.html").write_text(_report(manifest, lines, result), encoding="utf-8")
    return result


def _report(manifest: dict, lines: list[str], result: str) -> str:
    rows = []
    for raw in lines:
        ev = json.loads(raw)
        rows.append(
            f"<tr><td>{ev['seq']}</td><td>{html.escape(ev['ts'])}</td><td>{html.escape(ev['type'])}</td><td><code>{html.escape(json.dumps(ev['payload'], ensure_ascii=False))}</code></td></tr>"
        )
    esc = html.escape
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Evidence: {esc(manifest["run_id"])}</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:4px;vertical-align:top}}code{{white-space:pre-wrap}}</style></head>
<body><h1>Run {esc(manifest["run_id"])}</h1>
<p>Seq 1..{manifest["last_seq"]}, head <code>{esc(manifest["head"])}</code>, exported {esc(manifest["exported_at"])} by {esc(manifest["exported_by"])}, key {esc(manifest["key_fingerprint"])}.</p>
<p>Verification when exported: <strong>{esc(result)}</strong>. Check it again offline with <code>reckon-verify</code>.</p>
<table><tr><th>seq</th><th>ts</th><th>type</th><th>payload</th></tr>
{"".join(rows)}
</table></body></html>
"""
