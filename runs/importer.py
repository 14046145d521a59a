"""Import of run logs in the reference JSONL format (CONTRACTS section 1), all-or-nothing per file.

``log_parse`` validates a file's bytes without touching the database and either returns its events
or raises ImportRejected naming the line and the reason. ``log_import`` then compares the file with
what is stored for the run: identical means unchanged, a longer file with an identical prefix is
appended as a tail, anything else is rejected. The comparison and the append happen in one
transaction under the run's lease, so a rejected file leaves nothing behind and an import can never
interleave with a live writer of the same run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from django.db import transaction

from runs.errors import FenceError, InvalidEvent, LeaseHeld
from runs.events import CURRENT_SCHEMA_VERSION, KEY_SECRET_SINCE, EventType, UnknownEventType, event_type, missing_fields, version_problem
from runs.fold import Event
from runs.identity import KEY_SECRET_FIELD, KEY_SECRET_WITHHELD
from runs.leases import lease_acquire, lease_release
from runs.json_strict import JsonRefused, json_loads_strict
from runs.models import Run
from runs.run_ids import run_id_problem
from runs.store import NewEvent, events_append, events_read
from runs.upcasters import payload_complete

IMPORT_HOLDER = "reckon-import"
_KEYS = {"seq", "type", "ts", "payload", "v"}


class ImportRejected(Exception):
    """The whole file is refused; the message names the line (where there is one) and the reason."""


@dataclass
class ParsedLog:
    run_id: str
    events: list[Event]
    torn_line: int | None = None


@dataclass
class ImportResult:
    path: str
    outcome: str  # imported | unchanged | extended | rejected
    run_id: str | None = None
    appended: int = 0
    first_seq: int | None = None
    last_seq: int | None = None
    torn_line: int | None = None
    reason: str = ""
    notes: list[str] = field(default_factory=list)

    def line(self) -> str:
        if self.outcome == "rejected":
            text = f"{self.path}: rejected: {self.reason}"
        elif self.outcome == "unchanged":
            text = f"{self.path}: unchanged (run {self.run_id}, {self.last_seq} events)"
        elif self.outcome == "imported":
            text = f"{self.path}: imported {self.appended} events as run {self.run_id}"
        else:
            text = f"{self.path}: extended run {self.run_id} by {self.appended} events (seq {self.first_seq}..{self.last_seq})"
        if self.torn_line is not None:
            text += f"; torn tail at line {self.torn_line} (no final newline, not parseable) was not imported"
        return text

    def as_dict(self) -> dict:
        return {
            "path": self.path,
            "outcome": self.outcome,
            "run_id": self.run_id,
            "appended": self.appended,
            "last_seq": self.last_seq,
            "torn_tail_line": self.torn_line,
            "reason": self.reason or None,
        }


def parse_ts(value: object) -> datetime:
    """An RFC 3339 timestamp in UTC (``Z`` or ``+00:00``), or ValueError saying why not."""
    if not isinstance(value, str) or len(value) < 20 or value[10] not in "Tt ":
        raise ValueError(f"ts {value!r} is not an RFC 3339 timestamp")
    try:
        parsed = datetime.fromisoformat(value[:-1] + "+00:00" if value[-1] in "Zz" else value)
    except ValueError:
        raise ValueError(f"ts {value!r} is not an RFC 3339 timestamp") from None
    if parsed.tzinfo is None:
        raise ValueError(f"ts {value!r} has no time zone; RFC 3339 UTC ends in Z")
    if parsed.utcoffset() != timezone.utc.utcoffset(None):
        raise ValueError(f"ts {value!r} is not in UTC")
    return parsed.astimezone(timezone.utc)


def _parse_line(raw: bytes, lineno: int, expected_seq: int, run_id: str) -> Event:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ImportRejected(f"line {lineno}: bytes that are not UTF-8 (byte {exc.start + 1} of the line)") from None
    try:
        obj = json_loads_strict(text)
    except JsonRefused as exc:
        raise ImportRejected(f"line {lineno}: {exc}") from None
    if not isinstance(obj, dict):
        raise ImportRejected(f"line {lineno}: not a JSON object")
    unknown = sorted(set(obj) - _KEYS)
    if unknown:
        raise ImportRejected(f"line {lineno}: unknown field {unknown[0]!r} (a line has seq, type, ts, payload and optional v)")
    for key in ("seq", "type", "ts", "payload"):
        if key not in obj:
            raise ImportRejected(f"line {lineno}: missing field {key!r}")
    seq = obj["seq"]
    if isinstance(seq, bool) or not isinstance(seq, int):
        raise ImportRejected(f"line {lineno}: seq {seq!r} is not an integer")
    if seq != expected_seq:
        kind = "a repeat" if seq < expected_seq else "a gap"
        raise ImportRejected(f"line {lineno}: seq {seq} where {expected_seq} was expected ({kind})")
    v = obj.get("v", 1)
    try:
        t = event_type(obj["type"])
    except UnknownEventType as exc:
        raise ImportRejected(f"line {lineno}: {exc}") from None
    if isinstance(v, int) and not isinstance(v, bool) and v > CURRENT_SCHEMA_VERSION:
        raise ImportRejected(
            f"line {lineno}: schema version {v} is newer than this reader knows (up to {CURRENT_SCHEMA_VERSION}); upgrade Reckon to import it"
        )
    try:
        ts = parse_ts(obj["ts"])
    except ValueError as exc:
        raise ImportRejected(f"line {lineno}: {exc}") from None
    payload = obj["payload"]
    if not isinstance(payload, dict):
        raise ImportRejected(f"line {lineno}: payload is not a JSON object")
    missing = missing_fields(t, payload)
    if missing:
        raise ImportRejected(f"line {lineno}: {t.value} payload lacks {', '.join(missing)}")
    withheld = t is EventType.RUN_STARTED and v >= KEY_SECRET_SINCE and payload.get(KEY_SECRET_FIELD) == KEY_SECRET_WITHHELD
    problem = version_problem(t, v, {k: x for k, x in payload.items() if k != KEY_SECRET_FIELD} if withheld else payload)
    if problem:
        raise ImportRejected(f"line {lineno}: {problem}")
    if v == CURRENT_SCHEMA_VERSION:
        payload = payload_complete(t.value, payload, run_id)
    if (t is EventType.RUN_STARTED) != (seq == 1):
        raise ImportRejected(f"line {lineno}: a run log begins with run_started at seq 1, and has it only there")
    if t is EventType.RUN_STARTED and payload["run_id"] != run_id:
        raise ImportRejected(f"line {lineno}: run_started names run {payload['run_id']!r} but the file is named for {run_id!r}")
    return Event(seq, t.value, payload, ts, v)


def log_parse(path: str, data: bytes) -> ParsedLog:
    """Validate a whole file; raise ImportRejected naming the first problem."""
    name = Path(path).name
    if not name.endswith(".jsonl") or name == ".jsonl":
        raise ImportRejected("a run log is named <run_id>.jsonl")
    run_id = name[: -len(".jsonl")]
    problem = run_id_problem(run_id)
    if problem:
        raise ImportRejected(f"the file name does not give a run id: {problem}")
    lines = data.split(b"\n")
    last = lines.pop()  # b"" when the file ends with a newline
    events: list[Event] = []
    for i, raw in enumerate(lines, start=1):
        events.append(_parse_line(raw, i, len(events) + 1, run_id))
    torn = None
    if last:
        lineno = len(lines) + 1
        try:
            events.append(_parse_line(last, lineno, len(events) + 1, run_id))
        except ImportRejected:
            try:
                json.loads(last.decode("utf-8"))
            except RecursionError:
                raise ImportRejected(f"line {lineno}: not JSON (nested too deeply)") from None
            except ValueError:  # also UnicodeDecodeError: a write cut inside a multi-byte character
                torn = lineno
            else:
                raise  # a complete object that breaks a rule is rejected like any other line
    if not events:
        raise ImportRejected("no complete events" + (f" (line {torn} is a torn tail)" if torn else ""))
    return ParsedLog(run_id, events, torn)


def _withheld(ev: Event) -> bool:
    return ev.type == EventType.RUN_STARTED.value and ev.payload.get(KEY_SECRET_FIELD) == KEY_SECRET_WITHHELD


def _same(stored: Event, new: Event) -> str | None:
    if _withheld(new) and KEY_SECRET_FIELD in stored.payload:
        # An export made for a person withholds the run's key secret; the rest must be the same.
        new = new._replace(payload={**new.payload, KEY_SECRET_FIELD: stored.payload[KEY_SECRET_FIELD]})
    return next((attr for attr in ("type", "v", "payload", "ts") if getattr(stored, attr) != getattr(new, attr)), None)


def log_import(path: str, data: bytes) -> ImportResult:
    """Import one file's bytes: imported, unchanged, extended or rejected, never half-written."""
    try:
        parsed = log_parse(path, data)
    except ImportRejected as exc:
        return ImportResult(path, "rejected", reason=str(exc))
    result = ImportResult(path, "unchanged", run_id=parsed.run_id, torn_line=parsed.torn_line)
    try:
        with transaction.atomic():
            stored_last = Run.objects.filter(run_id=parsed.run_id).values_list("last_seq", flat=True).first() or 0
            stored = events_read(run_id=parsed.run_id) if stored_last else []
            for old, new in zip(stored, parsed.events):
                differs = _same(old, new)
                if differs:
                    raise ImportRejected(
                        f"line {new.seq}: differs from the stored event seq {old.seq} in {differs}; the stored prefix is not this file's"
                    )
            tail = parsed.events[len(stored):]
            result.last_seq = max(len(stored), len(parsed.events))
            if not tail:
                return result
            if _withheld(tail[0]):
                raise ImportRejected(
                    f"line 1: the run's {KEY_SECRET_FIELD} is withheld ({KEY_SECRET_WITHHELD}): this log was exported for a person, and without its secret "
                    "the run's keys could not be computed again; import it where the run is stored, or restore the run from a database backup"
                )
            lease = lease_acquire(run_id=parsed.run_id, holder=IMPORT_HOLDER, origin=Run.Origin.IMPORT)
            events_append(
                run_id=parsed.run_id,
                epoch=lease.epoch,
                expected_seq=len(stored),
                events=[NewEvent(e.type, e.payload, e.ts, e.v) for e in tail],
                key_secret_fill=False,  # a log is kept exactly as given: one without a secret keeps the old keys
            )
            lease_release(run_id=parsed.run_id, epoch=lease.epoch)
            if not stored:
                Run.objects.filter(run_id=parsed.run_id).update(source_file=str(path)[:500])
    except ImportRejected as exc:
        return ImportResult(path, "rejected", run_id=parsed.run_id, reason=str(exc))
    except LeaseHeld as exc:
        return ImportResult(path, "rejected", run_id=parsed.run_id, reason=f"{exc}; try again when it is released")
    except (FenceError, InvalidEvent) as exc:
        return ImportResult(path, "rejected", run_id=parsed.run_id, reason=str(exc))
    result.outcome = "extended" if stored else "imported"
    result.appended = len(tail)
    result.first_seq = len(stored) + 1
    return result


def _outside(folder: Path, found: Path) -> str | None:
    # A symlink inside an imported folder may point anywhere; importing what it points to would read
    # files the operator never named. Links that stay inside the folder are fine.
    if found.resolve().is_relative_to(folder.resolve()):
        return None
    return "a symbolic link to a file outside the imported folder; not followed (name the file itself to import it)"


def paths_expand(paths: list[str]) -> list[tuple[str, str | None]]:
    """Files to import, in order: (path, None), or (path, reason) for a path that cannot be read."""
    out: list[tuple[str, str | None]] = []
    for p in paths:
        path = Path(p)
        if path.is_dir():
            found = sorted(f for f in path.rglob("*.jsonl") if f.is_file())
            if not found:
                out.append((p, "no .jsonl files in this folder"))
            out.extend((str(f), _outside(path, f)) for f in found)
        elif path.exists():
            out.append((p, None))
        else:
            out.append((p, "no such file or folder"))
    return out


def paths_import(paths: list[str]) -> list[ImportResult]:
    results = []
    for p, problem in paths_expand(paths):
        if problem:
            results.append(ImportResult(p, "rejected", reason=problem))
            continue
        try:
            data = Path(p).read_bytes()
        except OSError as exc:
            results.append(ImportResult(p, "rejected", reason=f"cannot be read: {exc.strerror}"))
            continue
        results.append(log_import(p, data))
    return results
