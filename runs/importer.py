"""Import of run logs in the reference JSONL format (CONTRACTS section 1), all-or-nothing per file.

The file is read as a stream, in chunks of ``RECKON_IMPORT_CHUNK`` events: each chunk is checked
line by line (``_LogReader``), compared with what is stored for the run where the two overlap, and
the rest appended. Memory holds one chunk, never the file. All chunks of one file go into one
database transaction, under the run's import lease: a line rejected anywhere, the last included,
rolls back every chunk written before it, so a rejected file leaves nothing behind and an import
never interleaves with a live writer of the same run. (One transaction rather than a staging table:
PostgreSQL keeps a long transaction's rows invisible until it commits, and the append path's fence,
chain and read models then work unchanged; SQLite holds its write lock for the whole file.)

Identical to what is stored means unchanged, a longer file with an identical prefix is appended
as a tail, anything else is rejected. On PostgreSQL the tail is written with COPY
(``runs.store.events_copy``) once a file holds more than one chunk.
"""

from __future__ import annotations

import io
import json
import logging
import multiprocessing
import os
import pickle
from dataclasses import dataclass, field
from functools import partial
from datetime import datetime, timezone
from pathlib import Path
from typing import BinaryIO, Iterator

import orjson
from django.conf import settings
from django.db import connection, transaction

from celery import current_app as celery_app
from runs import store
from runs.errors import FenceError, InvalidEvent, LeaseHeld, TooLarge
from runs.events import CURRENT_SCHEMA_VERSION, KEY_SECRET_SINCE, PLAIN_CHECKS, EventType, UnknownEventType, event_type, missing_fields, version_problem
from runs.fold import Event, gc_paused
from runs.identity import KEY_SECRET_FIELD, KEY_SECRET_WITHHELD
from runs.leases import lease_acquire, lease_release
from runs.json_strict import JsonRefused, json_loads_strict_bytes
from runs.models import Run, RunImport
from runs.run_ids import run_id_problem
from runs.snapshots import SnapshotFoldAside, snapshot_first_due
from runs.canonical import sealing_now
from runs.store import PreparedChunk, after_append_merged, events_append, events_append_prepared, events_copy, events_prepare, events_read, plain_spec, prepared_dumps, prepared_loads
from runs.tasks import snapshot_due, snapshot_on_append
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


def _parse_line(raw: bytes, lineno: int, expected_seq: int, run_id: str, times: list[str] | None = None) -> Event:
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
    if times is not None:
        times.append(obj["ts"])
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
        # When a list: each accepted line's bytes (without its newline) are kept in it as well,
        # for a reader in another process to hand over (``_ChunksAside``).
        self.raws: list[bytes] | None = None
        # When a list: each accepted line's ts as the line wrote it (``runs.store.events_prepare``).
        self.times: list[str] | None = None

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
                chunk.append(_parse_line(raw[:-1], lineno, self.count + 1, run_id, self.times))
                self.count += 1
                if self.raws is not None:
                    self.raws.append(raw[:-1])
            else:  # the last line, with no final newline, or a line longer than the limit
                if len(raw) > limit:
                    raise ImportRejected(f"line {lineno}: longer than {_bytes_text(limit)} (RECKON_IMPORT_MAX_LINE_BYTES)")
                try:
                    chunk.append(_parse_line(raw, lineno, self.count + 1, run_id, self.times))
                    self.count += 1
                    if self.raws is not None:
                        self.raws.append(raw)
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


def _event_accepted(raw: bytes, run_id: str) -> Event:
    """The event ``_parse_line`` made of ``raw``, a line it accepted (in another process): decoded
    again, with none of the checks it passed. orjson decodes every line the strict reader accepts
    to the same value, but a number beyond a double, which only the strict reader itself reads."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        obj = json_loads_strict_bytes(raw)
    v = obj.get("v", 1)
    type_, payload, ts = obj["type"], obj["payload"], obj["ts"]
    if v == CURRENT_SCHEMA_VERSION:
        payload = payload_complete(type_, payload, run_id)
    return Event(obj["seq"], type_, payload, _ts_utc(ts) or parse_ts(ts), v)


class _ChunksAside:
    """The chunks of a long log after its first, read and checked by a child process while the
    importer writes: the lines' JSON proofs and rules are about half of an import's own time.

    The child is forked with the reader's generator suspended after the first chunk and goes on
    with it, exactly as the importer would have (the same checks, the same messages, the torn tail),
    sending each chunk's accepted lines as bytes; the importer decodes them again (``_event_accepted``,
    a quarter of the cost of checking them). A rejection is sent in its turn, after the chunks before
    it, so the importer meets it where it would have. The child never touches the database."""

    def __init__(self, reader: _LogReader, chunks: Iterator[list[Event]], prepare_after: int | None = None, sealing=None):
        self.reader = reader
        ctx = multiprocessing.get_context("fork")
        self._conn, theirs = ctx.Pipe(duplex=False)
        args = (theirs, reader, chunks, prepare_after, sealing)
        self._proc = ctx.Process(target=_read_aside, args=args, daemon=True, name=f"reckon import reader {reader.run_id}")
        self._proc.start()
        theirs.close()
        self._open = True

    def __iter__(self) -> Iterator[list[Event] | PreparedChunk]:
        run_id = self.reader.run_id
        while self._open:
            try:
                msg = self._conn.recv_bytes()
            except EOFError:
                self.close()
                raise RuntimeError(f"the process reading the log of run {run_id!r} ended without a word") from None
            kind, body = msg[:1], msg[1:]
            if kind == b"P":
                yield prepared_loads(body)
                continue
            if kind == b"C":
                yield [_event_accepted(line, run_id) for line in body.split(b"\n")]
                continue
            self.close()
            if kind == b"D":
                self.reader.count, self.reader.torn_line = pickle.loads(body)
                return
            if kind == b"R":
                raise ImportRejected(body.decode("utf-8", "surrogatepass"))
            if kind == b"I":
                raise InvalidEvent(body.decode("utf-8", "surrogatepass"))
            if kind == b"T":
                raise pickle.loads(body)
            raise RuntimeError(f"reading the log of run {run_id!r} failed: {body.decode('utf-8', 'replace')}")

    def close(self) -> None:
        if not self._open:
            return
        self._open = False
        self._conn.close()  # a child still sending meets a broken pipe and ends
        self._proc.join(timeout=30)
        if self._proc.exitcode is None:
            self._proc.kill()
            self._proc.join()


def _read_aside(conn, reader: _LogReader, chunks: Iterator[list[Event]], prepare_after: int | None, sealing) -> None:
    # The child of _ChunksAside: the reader's own generator, each chunk's lines sent as they pass;
    # or, for a chunk that follows one holding new events (``prepare_after``: the last seq stored
    # before the import), the chunk prepared for its write (``runs.store.events_prepare``), with
    # the store's own checks and messages.
    def keep() -> None:
        # A chunk's lines are sent only for a chunk that will not come prepared (its first seq,
        # the reader's count + 1, is not after a chunk of new events); a prepared one keeps the
        # times as written instead, whose text is mostly the chain's own.
        lines = prepare_after is None or reader.count + 1 < prepare_after + 2
        reader.raws, reader.times = ([], None) if lines else (None, [])

    keep()
    try:
        for events in chunks:
            first = events[0].seq
            if prepare_after is not None and first >= prepare_after + 2:
                try:
                    prepared = events_prepare(reader.run_id, first - 1, events, sealing=sealing, key_secret_fill=False, ts_given=reader.times, proved=True)
                except TooLarge as exc:  # whole, for the importer to name its line and limit
                    conn.send_bytes(b"T" + pickle.dumps(exc))
                    return
                except InvalidEvent as exc:
                    conn.send_bytes(b"I" + str(exc).encode("utf-8", "surrogatepass"))
                    return
                # Only the bytes are kept while the importer takes them (the send waits for it).
                message = b"P" + prepared_dumps(prepared)
                events = prepared = reader.times = None
                conn.send_bytes(message)
                message = None
            else:
                conn.send_bytes(b"C" + b"\n".join(reader.raws))
            keep()
        conn.send_bytes(b"D" + pickle.dumps((reader.count, reader.torn_line)))
    except ImportRejected as exc:
        conn.send_bytes(b"R" + str(exc).encode("utf-8", "surrogatepass"))
    except (BrokenPipeError, EOFError):  # the importer stopped reading (a rejection, a failure)
        pass
    except BaseException as exc:  # noqa: BLE001 - handed to the importer, which fails the import with it
        try:
            conn.send_bytes(b"X" + f"{type(exc).__name__}: {exc}".encode("utf-8", "replace"))
        except OSError:
            pass
    finally:
        conn.close()


def _stream_size(stream: BinaryIO) -> int | None:
    try:
        return os.fstat(stream.fileno()).st_size
    except (AttributeError, OSError, io.UnsupportedOperation):
        pass
    try:
        return len(stream.getbuffer())  # type: ignore[attr-defined]
    except (AttributeError, TypeError):
        return None


def _chunks_read(reader: _LogReader, size: int, stream: BinaryIO, stored_last: int | None = None) -> Iterator[list[Event] | PreparedChunk]:
    """The reader's chunks; those after the first read aside (``_ChunksAside``) when the file is
    long enough for a second process to pay (``RECKON_IMPORT_READ_ASIDE_BYTES``). There, given
    ``stored_last`` (the run's last seq before the import), each chunk after the first that holds
    new events comes prepared for its write (``PreparedChunk``): checked, encoded and framed by
    the store's own code in the reading process, so that the importing process is left the
    decoding, the writes and the read models."""
    chunks = reader.chunks(size)
    first = next(chunks, None)
    if first is None:
        return
    yield first
    length = _stream_size(stream)
    if len(first) < size or length is None or length < settings.RECKON_IMPORT_READ_ASIDE_BYTES:
        yield from chunks
        return
    prepare_after = stored_last if stored_last is not None and store._chain_on else None
    # The sealed names are read here, before the fork: the reading process never touches the database.
    aside = _ChunksAside(reader, chunks, prepare_after, sealing_now() if prepare_after is not None else None)
    try:
        yield from aside
    finally:
        aside.close()


class _ReadAhead:
    """A reader's chunks, of which the next may be read early (``read_ahead``): while the database
    works through a chunk the importer has sent (``events_copy``'s ``meanwhile``)."""

    def __init__(self, chunks: Iterator[list[Event]]):
        self._chunks = chunks
        self._next: list[Event] | None = None
        self._done = False

    def __iter__(self) -> "_ReadAhead":
        return self

    def __next__(self) -> list[Event]:
        if self._next is not None:
            chunk, self._next = self._next, None
            return chunk
        if self._done:
            raise StopIteration
        return next(self._chunks)

    def read_ahead(self) -> None:
        if self._next is None and not self._done:
            try:
                self._next = next(self._chunks)
            except StopIteration:
                self._done = True

    def close(self) -> None:
        self._chunks.close()  # type: ignore[attr-defined]


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


def _snapshot_fold_here(run_id: str) -> SnapshotFoldAside | None:
    """A fold of the run as it is imported, when its first snapshot would be folded in this process
    after the commit anyway (tasks run eagerly: no broker, the embedded default): the events the
    import writes are then folded as they are written, by a child process (``SnapshotFoldAside``),
    instead of read back from the database."""
    if not celery_app.conf.task_always_eager or snapshot_on_append not in store._AFTER_APPEND:
        return None
    try:
        return SnapshotFoldAside(run_id)
    except OSError:  # no process to be had: the check after the commit folds the run as before
        log.exception("could not start the fold of run %s's first snapshot beside its import", run_id)
        return None


def _fold_written(folding: SnapshotFoldAside, written: list[Event], texts: list[bytes]) -> bool:
    # The fold must see each event as a read gives it: the payload decoded from the text the store
    # wrote (``texts``, its keys sorted) and upcast, which the fold's process does. A fold that cannot
    # be fed leaves the snapshot to the check after the commit, which reads the log back (False).
    try:
        folding.feed_written(written, texts)
    except Exception:  # noqa: BLE001 - the snapshot is a cache: whatever the fold refuses, the check after the commit meets as before
        log.exception("could not hand run events to the fold of the run's first snapshot")
        folding.close()
        return False
    return True


def _fold_write(folding: SnapshotFoldAside, run_id: str) -> None:
    # In the import's transaction, so the run and its snapshot commit together; in a savepoint of
    # its own (the writes' atomic blocks), so a snapshot that cannot be written costs the snapshot,
    # never the import: the check after the commit then finds none and folds the run itself.
    try:
        folding.write()
    except Exception:
        log.exception("could not write the first snapshot of run %s while importing it", run_id)


def log_import(path: str, data: bytes) -> ImportResult:
    """Import one file's bytes held in memory: ``log_import_stream`` over them."""
    return log_import_stream(path, io.BytesIO(data))


def log_import_stream(path: str, stream: BinaryIO, *, chunk: int | None = None) -> ImportResult:
    """Import one file read from ``stream``: imported, unchanged, extended or rejected, never
    half-written. ``chunk``: events per chunk (default ``RECKON_IMPORT_CHUNK``)."""
    try:
        run_id = log_run_id(path)
    except ImportRejected as exc:
        return ImportResult(path, "rejected", reason=str(exc))
    size = chunk or settings.RECKON_IMPORT_CHUNK
    reader = _LogReader(run_id, stream)
    result = ImportResult(path, "unchanged", run_id=run_id)
    stored_last = 0
    appended = 0
    folding = None
    chunks = None
    try:
        # The collector is paused for the file: each chunk makes some hundred thousand small
        # objects (decoded payloads, events, rows) that live until the chunk is written, and the
        # collector would scan them, and the whole process's heap, many times over. Checking and
        # writing events make no reference cycles, and the pause ends with the import.
        with gc_paused(), transaction.atomic(), after_append_merged(), store.rereads_kept(run_id):
            stored_last = Run.objects.filter(run_id=run_id).values_list("last_seq", flat=True).first() or 0
            lease = None
            copy = False
            chunks = _ReadAhead(_chunks_read(reader, size, stream, stored_last))
            for events in chunks:
                prepared = None
                if type(events) is PreparedChunk:
                    # Checked, encoded and framed by the reading process; only after a chunk of
                    # new events, so never a part the run already holds, nor the lease's first write.
                    prepared, events = events, events.events
                first = events[0].seq
                if first <= stored_last:
                    # The part of this chunk the run already holds must be identical, event by event.
                    upto = min(events[-1].seq, stored_last)
                    for old, new in zip(events_read(run_id=run_id, after=first - 1, upto=upto), events):
                        differs = _same(old, new)
                        if differs:
                            raise ImportRejected(f"line {new.seq}: differs from the stored event seq {old.seq} in {differs}; the stored prefix is not this file's")
                    events = events[upto - first + 1 :]
                    if not events:
                        continue
                if lease is None:
                    if _withheld(events[0]):
                        raise ImportRejected(
                            f"line 1: the run's {KEY_SECRET_FIELD} is withheld ({KEY_SECRET_WITHHELD}): this log was exported for a person, and without its secret "
                            "the run's keys could not be computed again; import it where the run is stored, or restore the run from a database backup"
                        )
                    lease = lease_acquire(run_id=run_id, holder=IMPORT_HOLDER, origin=Run.Origin.IMPORT)
                    # The events of this epoch arrived by import: the run screen marks them.
                    RunImport.objects.create(run_id=run_id, epoch=lease.epoch, source_file=str(path)[:500])
                    # COPY once the file is known to hold more than one chunk: a small file goes
                    # through the ordinary append, one statement.
                    copy = connection.vendor == "postgresql" and len(events) >= size
                    # A new run of more than one chunk is folded as it is written (a file of one
                    # chunk is read back after the commit, if its snapshot is due at all).
                    if not stored_last and len(events) >= size:
                        folding = _snapshot_fold_here(run_id)
                # The checked events go to the store as they are (an Event has every field a
                # NewEvent has; the store assigns the same seqs). A log is kept exactly as given:
                # one without a secret keeps the old keys.
                texts: list[bytes] | None = [] if folding is not None else None
                if copy:
                    # The next chunk is read and checked while the server inserts this one.
                    written = events_copy(
                        run_id=run_id, epoch=lease.epoch, expected_seq=stored_last + appended, events=events, key_secret_fill=False, texts=texts, meanwhile=chunks.read_ahead, prepared=prepared
                    )
                elif prepared is not None:
                    written = events_append_prepared(run_id=run_id, epoch=lease.epoch, expected_seq=stored_last + appended, prepared=prepared, key_secret_fill=False, texts=texts)
                else:
                    written = events_append(run_id=run_id, epoch=lease.epoch, expected_seq=stored_last + appended, events=events, key_secret_fill=False, texts=texts)
                appended += len(events)
                if folding is not None and not _fold_written(folding, written, texts):
                    folding = None
            if lease is not None:
                if folding is not None:
                    if snapshot_due(0, appended, settings.RECKON_SNAPSHOT_INTERVAL, settings.RECKON_SNAPSHOT_MIN_EVENTS) and snapshot_first_due(run_id=run_id, head=appended):
                        _fold_write(folding, run_id)
                    else:
                        folding.close()
                    folding = None
                lease_release(run_id=run_id, epoch=lease.epoch)
                if not stored_last:
                    Run.objects.filter(run_id=run_id).update(source_file=str(path)[:500])
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
        if folding is not None:  # a rejected (or failed) import: its fold's process stops
            folding.close()
        if chunks is not None:  # and so does the process reading its lines, if any
            chunks.close()
    result.torn_line = reader.torn_line
    result.last_seq = max(stored_last, reader.count)
    if appended:
        result.outcome = "extended" if stored_last else "imported"
        result.appended = appended
        result.first_seq = stored_last + 1
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
