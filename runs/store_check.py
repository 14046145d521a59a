"""The append's first steps (runs.store.events_append): check each event, number it, complete and
encode its payload, and frame its canonical bytes for the chain (runs.canonical); and the size
rules the fence enforces. Nothing here touches the database."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Sequence

import orjson
from django.conf import settings

from runs.canonical import event_canon, event_canons, sealing_now
from runs.errors import EventTooLarge, InvalidEvent, RunTooLarge
from runs.events import (
    COMPLETION_SOURCES,
    CURRENT_SCHEMA_VERSION,
    INTRODUCED_IN,
    KEY_SECRET_SINCE,
    PLAIN_CHECKS,
    REQUIRED_FIELDS,
    TERMINAL,
    EventType,
    UnknownEventType,
    event_type,
    live_run_only,
    missing_fields,
    version_problem,
)
from runs.fold import Event
from runs.identity import KEY_SECRET_FIELD, key_secret_new
from runs.upcasters import UPCASTERS, call_tenant_problem, payload_complete

_TERMINAL_NAMES = frozenset(t.value for t in TERMINAL)
# Why an append is refused when it holds the agent's own work after its run's end.
AFTER_THE_END = "an agent's own events (turns, messages, tool calls and their live results) are refused after its end"


@dataclass(slots=True)
class Batch:
    """An append's events, checked and encoded: their times, payload texts (orjson, keys sorted:
    what the store writes), canonical bytes, (seq, salts) of those with sealed values, the events
    as the fold sees them, the seq of a terminal event or None, the last seq, the payloads' bytes,
    and whether it holds the agent's own work (``runs.events.live_run_only``), which a finished
    run refuses."""

    tss: list[datetime]
    encoded: list[bytes]
    canons: list[bytes]
    seals: list[tuple[int, dict]]
    appended: list[Event]
    finished_seq: int | None
    last_seq: int
    nbytes: int
    live: bool

    @property
    def finishing(self) -> bool:
        return self.finished_seq is not None

    @property
    def needs_open_run(self) -> bool:
        """Refused by a run that has already finished: a second end, or the agent's own work."""
        return self.finished_seq is not None or self.live


# For the common case: a registered type that needs no check beyond its required fields and the
# range of versions it may be written with. Anything else takes the full check in ``_check_slow``.
# ``_COMPLETED_TYPES``: the types whose current-version payload ``payload_complete`` may fill in.
_PLAIN = PLAIN_CHECKS
_COMPLETED_TYPES = frozenset(t for t, _ in UPCASTERS)
_STARTED = EventType.TOOL_CALL_STARTED.value
_COMPLETED = EventType.TOOL_CALL_COMPLETED.value
# A completion's only rule beyond its fields and versions is its source (``version_problem``): one
# whose source is absent or one of the known ones is plain too. A third of a working agent's events
# are completions; the full check costs each of them about a microsecond, in the importer and here.
_COMPLETED_PLAIN = (frozenset(REQUIRED_FIELDS[EventType.TOOL_CALL_COMPLETED]), INTRODUCED_IN.get(EventType.TOOL_CALL_COMPLETED, 1))


def plain_spec(type_, payload) -> tuple[frozenset[str], int] | None:
    """(required payload keys, first version) when the event's only checks left are those two
    (``PLAIN_CHECKS``, or a completion with a known source), else None: the full check decides."""
    spec = _PLAIN.get(type_) if type(type_) is str else None
    if spec is None and type_ == _COMPLETED and type(payload) is dict and payload.get("source", "live") in COMPLETION_SOURCES:
        return _COMPLETED_PLAIN
    return spec


def _check_slow(i: int, seq: int, run_id: str, ev) -> None:
    """Refuse an event the log must not hold, naming it by position and seq (returns for a valid one)."""
    try:
        t = event_type(ev.type)
    except UnknownEventType as exc:
        raise InvalidEvent(f"event {i} (seq {seq}): {exc}") from None
    if not isinstance(ev.payload, dict):
        raise InvalidEvent(f"event {i} (seq {seq}, {ev.type}): payload must be a JSON object")
    missing = missing_fields(t, ev.payload)
    if missing:
        raise InvalidEvent(f"event {i} (seq {seq}, {ev.type}): payload lacks {', '.join(missing)}")
    problem = version_problem(t, ev.v, ev.payload)
    if problem:
        raise InvalidEvent(f"event {i} (seq {seq}, {ev.type}): {problem}")
    if (t is EventType.RUN_STARTED) != (seq == 1):
        raise InvalidEvent(f"event {i} (seq {seq}): a run begins with run_started at seq 1, and only there")
    if t is EventType.RUN_STARTED and ev.payload["run_id"] != run_id:
        raise InvalidEvent(f"event {i} (seq 1): run_started names run {ev.payload['run_id']!r}, not {run_id!r}")


def _has_nul(value) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(_has_nul(v) for v in value)
    return False


_DUMPS_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_SORT_KEYS
# Without OPT_NON_STR_KEYS orjson takes a faster path; a payload with non-string keys is encoded
# again with it (its keys become strings, as before).
# Payloads are stored with their keys sorted: that text is, for almost every payload, exactly the
# payload's RFC 8785 bytes (runs.canonical), so the chain hashes the very text the store
# writes anyway, one encoding per event instead of two. A reader decodes the same object either way.
_FAST_OPTIONS = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_SORT_KEYS
_orjson_dumps = orjson.dumps


def _dumps_full(i: int, payload: dict) -> bytes:
    """A payload orjson's fast path (``_FAST_OPTIONS``, tried first by ``events_append``) refused,
    as UTF-8 bytes with non-string keys allowed; or refused as JSON the store cannot hold.

    The caller must still pass the bytes through ``_suspects_check`` (at once, or for a whole
    batch by ``_batch_check``): orjson writes NaN and Infinity as null, and a NUL as \\u0000.
    """
    try:
        return _orjson_dumps(payload, option=_DUMPS_OPTIONS)
    except TypeError as exc:  # not JSON-serialisable, or a lone surrogate in a string
        raise InvalidEvent(f"event {i}: payload is not storable JSON: {exc}") from None


def _suspects_check(i: int, payload: dict, raw: bytes) -> None:
    # find, not ``in``: a bytes operand of ``in`` is first tried as an integer, and the TypeError
    # raised and cleared costs more than the search.
    if raw.find(b"null") >= 0:
        # orjson writes NaN and Infinity as null; only when a null appears is the slower check
        # needed to tell a real null from a number that JSON cannot represent.
        try:
            json.dumps(payload, allow_nan=False)
        except ValueError as exc:
            raise InvalidEvent(f"event {i}: payload is not storable JSON: {exc}") from None
    if raw.find(b"\\u0000") >= 0 and _has_nul(payload):
        # NUL cannot be held by PostgreSQL text (nor jsonb); refusing it on every backend keeps logs portable.
        raise InvalidEvent(f"event {i}: payload contains a NUL character (\\u0000), which the store does not hold")


def _batch_check(appended: list[Event], encoded: list[bytes]) -> None:
    """``_suspects_check`` for a batch: one scan of all the texts, and per event only if it finds something."""
    if len(encoded) == 1:
        _suspects_check(0, appended[0].payload, encoded[0])
        return
    blob = b"".join(encoded)
    if b"null" in blob or b"\\u0000" in blob:
        for i, (ev, raw) in enumerate(zip(appended, encoded)):
            _suspects_check(i, ev.payload, raw)


def events_check(
    run_id: str,
    expected_seq: int,
    events: Sequence,
    key_secret_fill: bool,
    now: datetime,
) -> Batch:
    """Check, number, complete and encode a batch for the append (``events_append``), and frame
    each event's canonical bytes for the chain. Raises InvalidEvent for an event the log must not
    hold (EventTooLarge for one beyond RECKON_MAX_EVENT_BYTES)."""
    # One pass: check each event, complete its payload to the current version, encode it, and
    # build what the caller gets back. This path runs once per event written; keep it lean (the
    # common case is checked here against ``_PLAIN``; anything unusual takes ``_check_slow``).
    tss: list[datetime] = []
    encoded: list[bytes] = []
    appended: list[Event] = []
    finished_seq = None
    live = False
    seq = expected_seq
    plain, current, completes, new_event = _PLAIN, CURRENT_SCHEMA_VERSION, _COMPLETED_TYPES, tuple.__new__
    dumps, fast = _orjson_dumps, _FAST_OPTIONS
    stored_sorted = True
    for i, ev in enumerate(events):
        seq += 1
        type_, payload, v = ev.type, ev.payload, ev.v
        spec = plain.get(type_) if type(type_) is str else None
        if spec is None:
            spec = plain_spec(type_, payload)
        if spec is None or seq == 1 or type(payload) is not dict or type(v) is not int or not spec[1] <= v <= current or not payload.keys() >= spec[0]:
            _check_slow(i, seq, run_id, ev)
        if v == current and type_ in completes:
            payload = payload_complete(type_, payload, run_id)
        if seq == 1 and key_secret_fill and v >= KEY_SECRET_SINCE and KEY_SECRET_FIELD not in payload:
            payload = {**payload, KEY_SECRET_FIELD: key_secret_new()}  # seq 1 is run_started (checked above)
        if type_ == _STARTED:
            problem = call_tenant_problem(payload)
            if problem:
                raise InvalidEvent(f"event {i} (seq {seq}, {type_}): {problem}")
        ts = ev.ts or now
        if ts is not now and not isinstance(ts, datetime):
            raise InvalidEvent(f"event {i} (seq {seq}): ts must be a datetime, got {type(ts).__name__}")
        tss.append(ts)
        # Encoded before anything is sent: a payload the store cannot hold refuses the append.
        try:
            encoded.append(dumps(payload, option=fast))
        except TypeError:
            encoded.append(_dumps_full(i, payload))
            stored_sorted = False  # its keys were not all strings: the chain encodes it again
        appended.append(new_event(Event, (seq, type_, payload, ts, v)))
        # Once the batch is known to hold the agent's work, only an event after an end needs asking.
        if (not live or finished_seq is not None) and live_run_only(type_, payload):
            if finished_seq is not None:
                raise InvalidEvent(f"event {i} (seq {seq}, {type_}): the run finishes at seq {finished_seq}; {AFTER_THE_END}")
            live = True
        if finished_seq is None and type_ in _TERMINAL_NAMES:
            finished_seq = seq
    _batch_check(appended, encoded)
    if max(map(len, encoded)) > settings.RECKON_MAX_EVENT_BYTES:
        raise _event_too_large(expected_seq, appended, encoded)
    canons, seals = batch_canons(expected_seq, appended, tss, encoded, stored_sorted)
    return Batch(tss, encoded, canons, seals, appended, finished_seq, seq, sum(map(len, encoded)), live)


def batch_canons(expected_seq: int, appended: list[Event], tss: list[datetime], encoded: list[bytes], stored_sorted: bool):
    """Each event's canonical bytes as chained (runs.canonical), and (seq, salts) of the events with
    sealed values, whose salts are written beside them (EventSeal) in the append's transaction."""
    sealing = sealing_now()
    if len(appended) == 1:  # the single append: no batch to scan at once
        ev = appended[0]
        canon, salts = event_canon(seq=ev.seq, type=ev.type, ts=ev.ts, v=ev.v, payload=ev.payload, stored=encoded[0], sealing=sealing, stored_sorted=stored_sorted)
        return [canon], ([(ev.seq, salts)] if salts is not None else [])
    return event_canons(
        first_seq=expected_seq + 1,
        types=[e.type for e in appended],
        tss=tss,
        vs=[e.v for e in appended],
        payloads=[e.payload for e in appended],
        stored=encoded,
        stored_sorted=stored_sorted,
        sealing=sealing,
    )


# The sizes (reckon/settings.py, "Sizes"): an event's payload is measured as the store writes it,
# the UTF-8 JSON text with its keys sorted (``encoded``), which is the text the chain hashes and a
# read returns; a run's, as the sum of those, kept on the run row (``Run.payload_bytes``). The
# fence moves that sum in the same statement as last_seq and refuses, with everything else it
# refuses, an append after which it would pass the limit: ``payload_bytes <= room``, where room
# is the limit less the batch's bytes. One comparison on the row the fence locks anyway, so a run's
# size costs the append no read and no scan; a refusal is told apart by ``_diagnose``.
_NO_LIMIT = 2**62


def room_for(nbytes: int) -> int:
    """The most a run may hold before an append of ``nbytes`` payload bytes is refused."""
    limit = settings.RECKON_MAX_RUN_BYTES
    return limit - nbytes if limit else _NO_LIMIT


def _event_too_large(expected_seq: int, appended: list[Event], encoded: list[bytes]) -> EventTooLarge:
    limit = settings.RECKON_MAX_EVENT_BYTES
    i, size = next((i, len(raw)) for i, raw in enumerate(encoded) if len(raw) > limit)
    seq = expected_seq + i + 1
    return EventTooLarge(
        f"event {i} (seq {seq}, {appended[i].type}): its payload is {size:,} bytes, more than the {limit:,} an event may hold (RECKON_MAX_EVENT_BYTES)",
        seq=seq,
        limit=limit,
        setting="RECKON_MAX_EVENT_BYTES",
    )


def run_too_large(run_id: str, expected_seq: int, stored: int, sizes: Sequence[int]) -> RunTooLarge:
    limit = settings.RECKON_MAX_RUN_BYTES
    total, seq = stored, expected_seq
    for size in sizes:  # the first event that does not fit
        total += size
        seq += 1
        if total > limit:
            break
    return RunTooLarge(
        f"run {run_id!r} holds {stored:,} bytes of payloads; with event seq {seq} it would hold {total:,}, more than the {limit:,} a run may hold (RECKON_MAX_RUN_BYTES)",
        seq=seq,
        limit=limit,
        setting="RECKON_MAX_RUN_BYTES",
    )
