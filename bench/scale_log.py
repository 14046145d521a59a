"""A generated run log in the reference format, written line by line: the input of the import,
export and replay measurements of ``bench scale``. Tool calls with about 100 bytes of arguments
and of results, as a working agent writes them, with a compaction every 1,000 events."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from runs.synthetic import synthetic_events

_T0 = datetime(2026, 9, 8, 11, 0, 0, tzinfo=UTC)
_PAD = "x" * 40  # brings each call's arguments and its result to about 100 bytes


def log_write(path: Path, *, events: int, chunk: int = 10_000) -> int:
    """Write ``events`` events of one run to ``path`` (named ``<run_id>.jsonl``); returns its size in bytes."""
    run_id = path.name.removesuffix(".jsonl")
    with path.open("w", encoding="utf-8") as f:
        f.write(json.dumps({"seq": 1, "type": "run_started", "ts": _T0.strftime("%Y-%m-%dT%H:%M:%SZ"), "payload": {"run_id": run_id}}) + "\n")
        f.write(json.dumps({"seq": 2, "type": "user_message", "ts": _T0.strftime("%Y-%m-%dT%H:%M:%SZ"), "payload": {"content": "Reconcile the Q3 ledgers."}}) + "\n")
        seq = 3
        while seq <= events:
            n = min(chunk, events - seq + 1)
            lines = []
            for ev in synthetic_events(run_id, seq, n, compact_every=1000):
                payload = ev.payload
                if "arguments" in payload:
                    payload = {**payload, "arguments": {**payload["arguments"], "memo": _PAD}}
                if isinstance(payload.get("content"), dict):
                    payload = {**payload, "content": {**payload["content"], "memo": _PAD}}
                ts = (_T0 + timedelta(milliseconds=seq)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
                lines.append(json.dumps({"seq": seq, "type": ev.type, "ts": ts, "payload": payload}))
                seq += 1
            f.write("\n".join(lines) + "\n")
    return path.stat().st_size
