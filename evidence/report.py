"""The evidence bundle's ``report.html``: one self-contained page a reviewer opens offline (no
script, no external resource): the verification result, the manifest, every uncertain call with
its evidence and decisions, who was shown what, and the run's whole timeline. It shows the
bundle's own lines, so a masked bundle's report is masked alike."""

from __future__ import annotations

import json
import re
from html import escape as _escape

from access.shown import cut_note, json_shown

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#1b1f24;background:#fafafa}
main{max-width:1100px;margin:0 auto;padding:1.2em}
h1{font-size:1.4em;margin:.2em 0}h2{font-size:1.1em;margin:1.4em 0 .4em;border-bottom:1px solid #ddd}
.ok{background:#e6f4ea;border:1px solid #8c8;padding:.6em;border-radius:4px;overflow-wrap:anywhere}
.bad{background:#fde8e8;border:1px solid #d88;padding:.6em;border-radius:4px;overflow-wrap:anywhere}
table{border-collapse:collapse;width:100%;background:#fff}td,th{border:1px solid #ddd;padding:4px 6px;vertical-align:top;text-align:left}
th{background:#f0f0f0}code,pre{font:12px/1.35 ui-monospace,monospace;white-space:pre-wrap;word-break:break-all;margin:0}
.call{background:#fff;border:1px solid #ddd;border-radius:4px;padding:.6em;margin:.6em 0}
.muted{color:#666}dl{display:grid;grid-template-columns:max-content 1fr;gap:2px 12px;margin:0}dt{font-weight:600}
@media (max-width:600px){main{padding:.5em}table,tbody,tr,td{display:block;width:auto}tr{border-bottom:2px solid #ccc}th,.wide{display:none}td{border:0;padding:2px 4px}dl{display:block}dd{margin:0 0 .4em}}
"""


# Unicode's bidirectional controls (embeddings, overrides, isolates, marks): live, they make text
# read as something other than what it is ("account \u202e1234" reads "account 4321"). Every page
# of Reckon and this report shows each as its code point, ``<U+202E>``.
BIDI_CONTROLS = re.compile("[\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c]")


def bidi_visible(text: str) -> str:
    """``text`` with each bidirectional control written as ``<U+XXXX>`` (escaped for HTML: text that
    is already HTML gets ``&lt;U+XXXX&gt;``, which reads the same)."""
    if not BIDI_CONTROLS.search(text):
        return text
    return BIDI_CONTROLS.sub(lambda m: f"&lt;U+{ord(m.group()):04X}&gt;", text)


def escape(value) -> str:
    return bidi_visible(_escape(str(value)))


def _j(value, seq=None) -> str:
    # Cut as every page cuts a long payload (access.shown): the whole of it is event ``seq`` of
    # the bundle's events.jsonl.
    text, cut = json_shown(value, indent=1)
    return escape(text + (f"{cut_note()}; the whole of it is seq {seq} in events.jsonl" if cut else ""))


def _calls(lines: list[dict]) -> list[dict]:
    """The uncertain calls of the run, from its own events, in the order they started."""
    by_key: dict[str, dict] = {}
    starts: dict[str, dict] = {}
    for ln in lines:
        if "withheld" in ln:
            continue
        p, t = ln["payload"], ln["type"]
        key = p.get("idempotency_key") if isinstance(p, dict) else None
        if t == "tool_call_started" and key:
            starts.setdefault(key, ln)
        if t == "tool_call_uncertain" and key:
            by_key.setdefault(key, {"key": key, "start": starts.get(key), "uncertain": ln, "steps": []})
        elif key in by_key and t in ("reconciliation_attempted", "approval_requested", "approval_decided", "tool_call_resolved", "tool_call_completed"):
            by_key[key]["steps"].append(ln)
    return list(by_key.values())


def report_html(*, manifest: dict, lines: list[dict], access: list[dict], result: str) -> str:
    esc = escape
    run_id = manifest["run_id"]
    out = [
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>Evidence: {esc(run_id)}</title><style>{_CSS}</style></head><body><main>",
        f"<h1>Evidence bundle: run {esc(run_id)}</h1>",
        f'<p class="{"ok" if result.startswith("verified") else "bad"}">Verification when exported: <strong>{esc(result)}</strong>. '
        "Check it again, offline, with <code>reckon-verify</code> on this folder or its zip (optionally <code>--public-key</code> with the key you trust).</p>",
        "<h2>Manifest</h2><dl>",
    ]
    for k in ("run_id", "first_seq", "last_seq", "head", "encoding", "chain", "chain_v2_upto", "withheld_prev", "masked", "exported_at", "exported_by", "key_fingerprint", "access_count", "access_head"):
        v = manifest.get(k)
        out.append(f"<dt>{esc(k)}</dt><dd><code>{esc(v if isinstance(v, str) else json.dumps(v))}</code></dd>")
    out.append("</dl>")
    if manifest.get("masked"):
        out.append('<p class="muted">Masked: sensitive values are shown as <code>[masked]</code>; each is still covered by the chain through its commitment. An event shown as <em>withheld</em> is covered by its hash alone, which the signed manifest ties to the events before it.</p>')

    calls = _calls(lines)
    out.append(f"<h2>Uncertain calls ({len(calls)})</h2>")
    if not calls:
        out.append('<p class="muted">None: every call of this run completed or failed on record.</p>')
    for c in calls:
        start, unc = c["start"], c["uncertain"]
        name = start["payload"].get("name", "?") if start else "?"
        out.append(f'<div class="call"><strong>{esc(str(name))}</strong> <span class="muted">key <code>{esc(c["key"])}</code></span>')
        if start:
            out.append(f'<p>Started at seq {start["seq"]}, {esc(start["ts"])}; arguments:</p><pre>{_j(start["payload"].get("arguments"), start["seq"])}</pre>')
        out.append(f'<p>Uncertain at seq {unc["seq"]}: {esc(str(unc["payload"].get("reason", ""))[:2000])}</p>')
        if c["steps"]:
            out.append("<table><tr><th>seq</th><th>when</th><th>what</th><th>evidence and decision</th></tr>")
            for s in c["steps"]:
                p = s["payload"]
                what = {
                    "reconciliation_attempted": f"lookup: {p.get('outcome', '')}",
                    "approval_requested": "approval requested",
                    "approval_decided": f"decided: {p.get('decision') or p.get('approved')} by {p.get('by', '')}",
                    "tool_call_resolved": f"resolved: {p.get('disposition', '')} ({p.get('by') or p.get('rule') or ''})",
                    "tool_call_completed": f"completed ({p.get('source', 'live')})",
                }[s["type"]]
                out.append(f'<tr><td>{s["seq"]}</td><td>{esc(s["ts"])}</td><td>{esc(what)}</td><td><pre>{_j(p, s["seq"])}</pre></td></tr>')
            out.append("</table>")
        else:
            out.append('<p class="muted">No lookup or decision recorded yet.</p>')
        out.append("</div>")

    out.append(f"<h2>Who was shown sensitive values ({len(access)})</h2>")
    if access:
        out.append("<table><tr><th>#</th><th>when</th><th>who</th><th>how</th><th>what</th><th>why</th></tr>")
        for a in access:
            what = "every sensitive field of the run" if a["all_fields"] else ", ".join(a["fields"]) + (f" of event {a['seq']}" if a["seq"] is not None else "")
            out.append(
                f'<tr><td>{a["n"]}</td><td>{esc(a["at"])}</td><td>{esc(a["actor_name"])} <span class="muted">({esc(a["actor_kind"])})</span></td>'
                f'<td>{esc(a["front_end"])}</td><td>{esc(what)}</td><td>{esc(a["why"])}</td></tr>'
            )
        out.append("</table>")
    else:
        out.append('<p class="muted">Nobody: no reveal, unmasked export or unmasked read of this run is recorded.</p>')

    out.append(f"<h2>Timeline ({len(lines)} events)</h2><table><tr><th>seq</th><th>when</th><th>type</th><th>payload</th><th class=\"wide\">hash</th></tr>")
    before = manifest.get("withheld_prev") or {}
    for ln in lines:
        if "withheld" in ln:
            if "digest" in ln:  # chain v2: linked by its digest
                how = f"; digest <code>{esc(ln['digest'])}</code>"
            else:
                prev = before.get(str(ln["seq"]))
                how = f"; the hash before it, signed in the manifest: <code>{esc(prev[:16])}…</code>" if isinstance(prev, str) else ""
            out.append(f'<tr><td>{ln["seq"]}</td><td></td><td class="muted">withheld</td><td class="muted">{esc(ln["withheld"])}{how}</td><td class="wide"><code>{esc(ln["hash"][:16])}…</code></td></tr>')
            continue
        out.append(f'<tr><td>{ln["seq"]}</td><td>{esc(ln["ts"])}</td><td>{esc(ln["type"])}</td><td><pre>{_j(ln["payload"], ln["seq"])}</pre></td><td class="wide"><code>{esc(ln["hash"][:16])}…</code></td></tr>')
    out.append("</table></main></body></html>\n")
    return "".join(out)
