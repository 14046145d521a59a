"""A run's evidence bundle (docs/evidence.md): its chained events, manifest,
public key, access records, decisions and an offline report, masked unless asked otherwise.

Masked, each sealed value (runs/canonical.py) is shown as its commitment; an event that would still
show a sensitive value (one sealed nowhere: a field marked sensitive after the event was written, a
value quoted in free text) is withheld: its line keeps its hash, and the signed manifest the hash
before it (an event chain v2 linked keeps its digest instead). Either way the bundle verifies with
``reckon-verify`` and nothing else in it is removed, reordered or changed. Unmasked, sealed values
come with their salts, except a run's key secret, which no bundle shows (access.masking).

An unmasked bundle is recorded as an access (every sensitive field of the run) before it is built,
so the record is part of the bundle's own chained access records.
"""

from __future__ import annotations

import io
import json
import zipfile
from datetime import UTC, datetime
from pathlib import Path

from access.chain import access_rows
from access.models import AccessRecord
from evidence.report import report_html
from access.services import access_record_write
from access.tokens import Principal
from recovery.masking import MASK, NEVER_REVEALED, run_sensitive_values, sensitive_fields, value_mask
from runs.chain import chain_rows, event_chain_canonical
from runs.errors import RunNotFound
from runs.models import Run
from evidence.signing import document_sign, fingerprint, public_pem, signing_key_load
from runs.verify import CHAIN, ENCODING, Problem, commitment, digest, files_digests, files_verify, genesis, pointer_get, pointer_parts, pointers_replace, ts_text, verified_line

DECISION_TYPES = frozenset({"approval_requested", "approval_decided", "tool_call_resolved"})
WITHHELD = "sensitive values outside the sealed ones"


def evidence_build(*, run_id: str, masked: bool, who: Principal, why: str = "") -> tuple[dict[str, bytes], str]:
    """The bundle's files (name -> bytes) and the verifier's ``verified: ...`` line, checked as a
    reviewer would check them. RunNotFound; ValueError for a run that cannot be exported (not
    chained yet, no events). An unmasked bundle is recorded as an access by ``who`` first."""
    run = Run.objects.filter(run_id=run_id).values("last_seq", "chain_v2_upto").first()
    if run is None:
        raise RunNotFound(run_id)
    if run["last_seq"] == 0:
        raise ValueError(f"run {run_id!r} has no events to export")
    if not masked:
        access_record_write(who=who, front_end=AccessRecord.FrontEnd.EXPORT, run_id=run_id, all_fields=True, why=why or "evidence bundle, unmasked")
    fields = sensitive_fields() if masked else NEVER_REVEALED
    values = run_sensitive_values(run_ids=[run_id], fields=fields) if masked else frozenset()
    v2_upto = run["chain_v2_upto"] or 0
    lines: list[dict] = []
    withheld_prev: dict[str, str] = {}  # seq -> the hash before each withheld event (chain v3's)
    prev = genesis(run_id, v2_upto=v2_upto)
    for seq, type_, v, ts, payload, stored, salts in chain_rows(run_id):
        if stored is None:
            raise ValueError(f"run {run_id!r} seq {seq} has no chain hash: run manage.py chain_backfill first")
        line = _line(seq, type_, v, ts, payload, stored, salts, fields, values, masked, v2=seq <= v2_upto)
        if "withheld" in line and seq > v2_upto:
            withheld_prev[str(seq)] = prev.hex()
        lines.append(line)
        prev = stored
    access = []
    for rec, stored in access_rows(run_id):
        if stored is None:
            raise ValueError(f"run {run_id!r} has access records without a chain link: run manage.py chain_backfill first")
        access.append({**rec, "hash": stored.hex()})
    key = signing_key_load()
    doc = {
        "run_id": run_id,
        "first_seq": 1,
        "last_seq": lines[-1]["seq"],
        "head": lines[-1]["hash"],
        "encoding": ENCODING,
        "chain": CHAIN,
        "chain_v2_upto": v2_upto,
        "withheld_prev": withheld_prev,
        "masked": masked,
        "exported_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "exported_by": who.name,
        "access_count": len(access),
        "access_head": access[-1]["hash"] if access else None,
    }
    files = {
        "events.jsonl": _jsonl(lines),
        "public_key.pem": public_pem(key),
        "access.jsonl": _jsonl(access),
        "decisions.jsonl": _jsonl([ln for ln in lines if ln.get("type") in DECISION_TYPES]),
    }
    # The signed manifest lists every other file with its sha256 (report.html too), so the report
    # is written before the signature, saying what the verifier must then say of the bundle; the
    # export is refused unless it does. (The report shows the manifest's fields, not its signature.)
    result = verified_line(run_id, lines[-1]["seq"], lines[-1]["hash"])
    files["report.html"] = report_html(manifest={**doc, "key_fingerprint": fingerprint(key)}, lines=lines, access=access, result=result).encode()
    manifest = document_sign(key=key, doc={**doc, "files": files_digests(files)})
    files["manifest.json"] = (json.dumps(manifest, indent=1, ensure_ascii=False) + "\n").encode()
    said = files_verify(files)
    if said != result:
        raise Problem(f"the bundle verifies as {said!r}, not as its report says ({result!r})")
    return files, said


def _line(seq, type_, v, ts, payload, stored, salts, fields, values, masked, *, v2: bool) -> dict:
    # Which sealed values this bundle withholds: when masked, each one the console would mask (under
    # a sensitive field name, or text that names or quotes a sensitive value); else the key secret.
    hidden = sorted(p for p in salts if _hides(p, payload, fields, values, masked))
    view = pointers_replace(payload, hidden, MASK)
    if value_mask(view, fields, values) != view:
        # Still a sensitive value in the clear, and not sealed: the event is withheld, by its hash
        # (chain v2 linked it by its digest, which stands in for it there).
        if v2:
            return {"seq": seq, "withheld": WITHHELD, "digest": digest(event_chain_canonical(seq, type_, v, ts, payload, salts)).hex(), "hash": stored.hex()}
        return {"seq": seq, "withheld": WITHHELD, "hash": stored.hex()}
    line = {"seq": seq, "type": type_, "ts": ts_text(ts), "v": v, "payload": view}
    if salts:
        line["sealed"] = {p: ({"commitment": commitment(s, pointer_get(payload, p)).hex()} if p in hidden else {"salt": s.hex()}) for p, s in sorted(salts.items())}
    line["hash"] = stored.hex()
    return line


def _hides(pointer: str, payload, fields, values, masked: bool) -> bool:
    if (pointer_parts(pointer) or [""])[-1] in (fields if masked else NEVER_REVEALED):
        return True
    if not masked:
        return False
    value = pointer_get(payload, pointer)
    return value_mask(value, fields, values) != value


def _jsonl(rows: list[dict]) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n" for r in rows).encode()


def evidence_write(*, files: dict[str, bytes], out: Path) -> None:
    """Write the bundle's files into folder ``out`` (created; files in it replaced)."""
    out.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (out / name).write_bytes(data)


def evidence_zip(*, files: dict[str, bytes], folder: str) -> bytes:
    """The bundle as a zip whose files sit in ``folder``/ (what the console hands over)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(f"{folder}/{name}", data)
    return buf.getvalue()


__all__ = ["Problem", "evidence_build", "evidence_write", "evidence_zip"]
