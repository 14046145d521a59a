"""Import of run logs in the reference JSONL format (one event a line: seq, type, ts, payload and
an optional v; docs/scale.md states the import's rules, docs/schema-versions.md the versions), all
or nothing per file.

The file is read as a stream, in chunks of ``RECKON_IMPORT_CHUNK`` events: each chunk is checked
line by line (``_LogReader``), compared with what is stored for the run where the two overlap, and
the rest appended through the one append path (``runs.store.events_append``). Memory holds one
chunk, never the file. All chunks of one file go into one database transaction, under the run's import lease: a line
rejected anywhere, the last included, rolls back every chunk written before it, so a rejected file
leaves nothing behind and an import never interleaves with a live writer of the same run. (One
transaction rather than a staging table: PostgreSQL keeps a long transaction's rows invisible until
it commits, and the append path's fence, chain and read models then work unchanged; SQLite holds
its write lock for the whole file.) Everything runs in the importing process.

Identical to what is stored means unchanged, a longer file with an identical prefix is appended
as a tail, anything else is rejected."""

from __future__ import annotations

import io
import json
import logging
from dataclasses import dataclass, field
from functools import partial
from datetime import datetime, timezone
from pathlib import Path
from typing import BinaryIO, Iterator

from django.conf import settings
from django.db import transaction

from runs import store
from runs.errors import FenceError, InvalidEvent, LeaseHeld, TooLarge
from runs.events import CURRENT_SCHEMA_VERSION, KEY_SECRET_SINCE, PLAIN_CHECKS, EventType, UnknownEventType, event_type, missing_fields, version_problem
from runs.fold import Event
from runs.identity import KEY_SECRET_FIELD, KEY_SECRET_WITHHELD
from runs.leases import lease_acquire, lease_release
from runs.json_strict import JsonRefused, json_loads_strict_bytes
from runs.models import Run, RunImport
from runs.run_ids import run_id_problem
from runs.store import after_append_merged, events_append, events_read, plain_spec
from runs.upcasters import payload_complete
from runs.verify import NotRegularFile, open_regular

IMPORT_HOLDER = "reckon-import"
log = logging.getLogger("reckon.import")
_KEYS = frozenset({"seq", "type", "ts", "payload", "v"})
_REQUIRED = ("seq", "type", "ts", "payload")  # in the order a missing one is named
_REQUIRED_KEYS = frozenset(_REQUIRED)


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


def _ts_utc(value: object) -> datetime | None:
    """``parse_ts`` for the form a log almost always holds (``...Z``), or None for anything else,
    which ``parse_ts`` then decides: Python 3.11 reads the Z itself as UTC."""
    if type(value) is str and len(value) >= 20 and value[-1] == "Z" and value[10] in "Tt ":
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            return None
        if parsed.tzinfo is timezone.utc:
            return parsed
    return None


def _line_ts(value: object, lineno: int) -> datetime:
    ts = _ts_utc(value)
    if ts is None:
        try:
            ts = parse_ts(value)
        except ValueError as exc:
            raise ImportRejected(f"line {lineno}: {exc}") from None
    return ts


def _parse_line(raw: bytes, lineno: int, expected_seq: int, run_id: str) -> Event:
    try:
        obj = json_loads_strict_bytes(raw)
    except JsonRefused as exc:
        # A line that decodes is valid UTF-8 (the decoder refuses anything else), so the UTF-8
        # check runs only for a refused line, where it names the byte first, as it always has.
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as bad:
            raise ImportRejected(f"line {lineno}: bytes that are not UTF-8 (byte {bad.start + 1} of the line)") from None
        raise ImportRejected(f"line {lineno}: {exc}") from None
    if not isinstance(obj, dict):
        raise ImportRejected(f"line {lineno}: not a JSON object")
    keys = obj.keys()
    if not keys <= _KEYS:
        unknown = sorted(set(obj) - _KEYS)
        raise ImportRejected(f"line {lineno}: unknown field {unknown[0]!r} (a line has seq, type, ts, payload and optional v)")
    if not keys >= _REQUIRED_KEYS:
        for key in _REQUIRED:
            if key not in obj:
                raise ImportRejected(f"line {lineno}: missing field {key!r}")
    seq = obj["seq"]
    if isinstance(seq, bool) or not isinstance(seq, int):
        raise ImportRejected(f"line {lineno}: seq {seq!r} is not an integer")
    if seq != expected_seq:
        kind = "a repeat" if seq < expected_seq else "a gap"
        raise ImportRejected(f"line {lineno}: seq {seq} where {expected_seq} was expected ({kind})")
    v = obj.get("v", 1)
    type_ = obj["type"]
    payload = obj["payload"]
    spec = PLAIN_CHECKS.get(type_) if type(type_) is str else None
    if spec is None:
        spec = plain_spec(type_, payload)
    if spec is not None and type(v) is int and spec[1] <= v <= CURRENT_SCHEMA_VERSION and type(payload) is dict and payload.keys() >= spec[0]:
        # The common case: a type whose only checks are its fields and its versions, both met
        # (``PLAIN_CHECKS``, ``runs.store.plain_spec``), so of the checks below only the time and the first line's remain.
        ts = _line_ts(obj["ts"], lineno)
        if seq == 1:
            raise ImportRejected(f"line {lineno}: a run log begins with run_started at seq 1, and has it only there")
        if v == CURRENT_SCHEMA_VERSION:
            payload = payload_complete(type_, payload, run_id)
    else:
        try:
            t = event_type(type_)
        except UnknownEventType as exc:
            raise ImportRejected(f"line {lineno}: {exc}") from None
        if isinstance(v, int) and not isinstance(v, bool) and v > CURRENT_SCHEMA_VERSION:
            raise ImportRejected(f"line {lineno}: schema version {v} is newer than this reader knows (up to {CURRENT_SCHEMA_VERSION}); upgrade Reckon to import it")
        ts = _line_ts(obj["ts"], lineno)
        if not isinstance(payload, dict):
            raise ImportRejected(f"line {lineno}: payload is not a JSON object")
        missing = missing_fields(t, payload)
        if missing:
            raise ImportRejected(f"line {lineno}: {t.value} payload lacks {', '.join(missing)}")
        withheld = t is EventType.RUN_STARTED and v >= KEY_SECRET_SINCE and payload.get(KEY_SECRET_FIELD) == KEY_SECRET_WITHHELD
        problem = version_problem(t, v, {k: x for k, x in payload.items() if k != KEY_SECRET_FIELD} if withheld else payload)
        if problem:
            raise ImportRejected(f"line {lineno}: {problem}")
        type_ = t.value
        if v == CURRENT_SCHEMA_VERSION:
            payload = payload_complete(type_, payload, run_id)
        if (t is EventType.RUN_STARTED) != (seq == 1):
            raise ImportRejected(f"line {lineno}: a run log begins with run_started at seq 1, and has it only there")
        if t is EventType.RUN_STARTED and payload["run_id"] != run_id:
            raise ImportRejected(f"line {lineno}: run_started names run {payload['run_id']!r} but the file is named for {run_id!r}")
    return Event(seq, type_, payload, ts, v)


def log_run_id(path: str) -> str:
    """The run id a file's name gives (``<run_id>.jsonl``), or ImportRejected saying why not."""
    name = Path(path).name
    if not name.endswith(".jsonl") or name == ".jsonl":
        raise ImportRejected("a run log is named <run_id>.jsonl")
    run_id = name[: -len(".jsonl")]
    problem = run_id_problem(run_id)
    if problem:
        raise ImportRejected(f"the file name does not give a run id: {problem}")
    return run_id


def _bytes_text(n: int) -> str:
    """A size as a limit's message names it: ``4 MiB``, ``1 KiB``, else in bytes."""
    for shift, unit in ((30, "GiB"), (20, "MiB"), (10, "KiB")):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} bytes"


class _LogReader:
    """A file's events, checked line by line and handed out in chunks; ``torn_line`` is set once
    the last line turned out to be a torn tail. Raises ImportRejected at the first bad line."""

    def __init__(self, run_id: str, stream: BinaryIO):
        self.run_id = run_id
        self.stream = stream
        self.count = 0
        self.torn_line: int | None = None

    def chunks(self, size: int) -> Iterator[list[Event]]:
        chunk: list[Event] = []
        lineno = 0
        run_id = self.run_id
        # Split at b"\n" only, each line keeping it, and never more than the limit read as one line
        # (a file with no newline, /dev/zero's like, would otherwise be read whole into memory). A
        # line cut at the limit has no newline: only the branch of a last line meets it.
        limit = settings.RECKON_IMPORT_MAX_LINE_BYTES
        for raw in iter(partial(self.stream.readline, limit + 1), b""):
            lineno += 1
            if raw[-1:] == b"\n":
                chunk.append(_parse_line(raw[:-1], lineno, self.count + 1, run_id))
                self.count += 1
            else:  # the last line, with no final newline, or a line longer than the limit
                if len(raw) > limit:
                    raise ImportRejected(f"line {lineno}: longer than {_bytes_text(limit)} (RECKON_IMPORT_MAX_LINE_BYTES)")
                try:
                    chunk.append(_parse_line(raw, lineno, self.count + 1, run_id))
                    self.count += 1
                except ImportRejected:
                    try:
                        json.loads(raw.decode("utf-8"))
                    except RecursionError:
                        raise ImportRejected(f"line {lineno}: not JSON (nested too deeply)") from None
                    except ValueError:  # also UnicodeDecodeError: a write cut inside a multi-byte character
                        self.torn_line = lineno
                    else:
                        raise  # a complete object that breaks a rule is rejected like any other line
            if len(chunk) >= size:
                yield chunk
                chunk = []
        if chunk:
            yield chunk
        if not self.count:
            raise ImportRejected("no complete events" + (f" (line {self.torn_line} is a torn tail)" if self.torn_line else ""))


def log_parse(path: str, data: bytes) -> ParsedLog:
    """Validate a whole file held in memory (tests, fixtures); raise ImportRejected naming the first problem."""
    run_id = log_run_id(path)
    reader = _LogReader(run_id, io.BytesIO(data))
    events = [ev for chunk in reader.chunks(1 << 30) for ev in chunk]
    return ParsedLog(run_id, events, reader.torn_line)


def _withheld(ev: Event) -> bool:
    return ev.type == EventType.RUN_STARTED.value and ev.payload.get(KEY_SECRET_FIELD) == KEY_SECRET_WITHHELD


def _same(stored: Event, new: Event) -> str | None:
    if _withheld(new) and KEY_SECRET_FIELD in stored.payload:
        # An export made for a person withholds the run's key secret; the rest must be the same.
        new = new._replace(payload={**new.payload, KEY_SECRET_FIELD: stored.payload[KEY_SECRET_FIELD]})
    return next((attr for attr in ("type", "v", "payload", "ts") if getattr(stored, attr) != getattr(new, attr)), None)


def log_import(path: str, data: bytes) -> ImportResult:
    """Import one file's bytes held in memory: ``log_import_stream`` over them."""
    return log_import_stream(path, io.BytesIO(data))


class _Import:
    """One file's import inside its transaction: what the run held before it (``stored_last``),
    what it has appended since, and the epoch of the import lease it writes under, taken at its
    first new event."""

    def __init__(self, path: str, run_id: str):
        self.path, self.run_id = path, run_id
        self.stored_last = Run.objects.filter(run_id=run_id).values_list("last_seq", flat=True).first() or 0
        self.appended = 0
        self.epoch: int | None = None

    def new_events(self, events: list[Event]) -> list[Event]:
        """The events of a chunk the run does not hold yet; the part it holds must be identical,
        event by event, or the file is rejected."""
        first = events[0].seq
        if first > self.stored_last:
            return events
        upto = min(events[-1].seq, self.stored_last)
        for old, new in zip(events_read(run_id=self.run_id, after=first - 1, upto=upto), events):
            differs = _same(old, new)
            if differs:
                raise ImportRejected(f"line {new.seq}: differs from the stored event seq {old.seq} in {differs}; the stored prefix is not this file's")
        return events[upto - first + 1 :]

    def write(self, events: list[Event]) -> None:
        """Append a chunk of new events. The checked events go to the store as they are (an Event
        has every field a NewEvent has; the store assigns the same seqs), and a log is kept exactly
        as given: one without a secret keeps the old keys."""
        if self.epoch is None:
            self._begin(events[0])
        events_append(run_id=self.run_id, epoch=self.epoch, expected_seq=self.stored_last + self.appended, events=events, key_secret_fill=False)
        self.appended += len(events)

    def _begin(self, first: Event) -> None:
        if _withheld(first):
            raise ImportRejected(
                f"line 1: the run's {KEY_SECRET_FIELD} is withheld ({KEY_SECRET_WITHHELD}): this log was exported for a person, and without its secret "
                "the run's keys could not be computed again; import it where the run is stored, or restore the run from a database backup"
            )
        self.epoch = lease_acquire(run_id=self.run_id, holder=IMPORT_HOLDER, origin=Run.Origin.IMPORT).epoch
        # The events of this epoch arrived by import: the run screen marks them.
        RunImport.objects.create(run_id=self.run_id, epoch=self.epoch, source_file=str(self.path)[:500])

    def finish(self) -> None:
        if self.epoch is None:
            return
        lease_release(run_id=self.run_id, epoch=self.epoch)
        if not self.stored_last:
            Run.objects.filter(run_id=self.run_id).update(source_file=str(self.path)[:500])


def log_import_stream(path: str, stream: BinaryIO, *, chunk: int | None = None) -> ImportResult:
    """Import one file read from ``stream``: imported, unchanged, extended or rejected, never
    half-written. ``chunk``: events per chunk (default ``RECKON_IMPORT_CHUNK``). The run's first
    snapshot, when due, is written after the commit by the after-append hooks (a task: with a
    broker in a worker, without one in this process), which fold the run a read chunk at a time."""
    try:
        run_id = log_run_id(path)
    except ImportRejected as exc:
        return ImportResult(path, "rejected", reason=str(exc))
    reader = _LogReader(run_id, stream)
    chunks = reader.chunks(chunk or settings.RECKON_IMPORT_CHUNK)
    try:
        with transaction.atomic(), after_append_merged(), store.rereads_kept(run_id):
            job = _Import(path, run_id)
            for events in chunks:
                events = job.new_events(events)
                if events:
                    job.write(events)
            job.finish()
    except ImportRejected as exc:
        return ImportResult(path, "rejected", run_id=run_id, reason=str(exc))
    except LeaseHeld as exc:
        return ImportResult(path, "rejected", run_id=run_id, reason=f"{exc}; try again when it is released")
    except TooLarge as exc:
        # The store's own limits (RECKON_MAX_EVENT_BYTES, RECKON_MAX_RUN_BYTES), as for every writer;
        # an imported line's number is its seq.
        return ImportResult(path, "rejected", run_id=run_id, reason=f"line {exc.seq}: {exc}")
    except (FenceError, InvalidEvent) as exc:
        return ImportResult(path, "rejected", run_id=run_id, reason=str(exc))
    finally:
        chunks.close()
    result = ImportResult(path, "unchanged", run_id=run_id, torn_line=reader.torn_line, last_seq=max(job.stored_last, reader.count))
    if job.appended:
        result.outcome = "extended" if job.stored_last else "imported"
        result.appended = job.appended
        result.first_seq = job.stored_last + 1
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
            # Everything named like a log but a folder (searched itself): a FIFO or a device is then
            # refused by name when it is opened, not skipped without a word.
            found = sorted(f for f in path.rglob("*.jsonl") if not f.is_dir())
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
            # Regular files only, checked on the opened file (a FIFO is opened without waiting for a writer).
            with open_regular(p, buffering=1 << 20) as stream:
                results.append(log_import_stream(p, stream))
        except NotRegularFile as exc:
            results.append(ImportResult(p, "rejected", reason=f"{exc}; only regular files are imported"))
        except OSError as exc:
            results.append(ImportResult(p, "rejected", reason=f"cannot be read: {exc.strerror}"))
    return results
