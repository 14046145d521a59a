"""The canonical bytes the append path chains for each event (docs/evidence.md), fast, and its
sealed values.

``runs.verify`` holds the definition (one exact encoder, shared with the offline verifier); this
module takes orjson's sorted output where it is provably the same bytes, and the exact encoder
everywhere else. The store imports it; runs/chain.py builds the backfill and the check on it.

Sealed values: a value stored under a sensitive field name (the policies' list, handed in by the
recovery layer through ``sealed_names_provider_set``, and always a run's key secret) is chained as a
salted commitment, so an evidence bundle can withhold it and still verify. Its salt is random and
kept beside the event (``EventSeal``). Deciding that costs a few byte scans of the encoded payload;
only a payload that names such a field takes the slower, exact path.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable
from datetime import UTC, datetime

import orjson

from runs.identity import KEY_SECRET_FIELD
from runs.verify import SEALED, canonical_json, commitment, event_canonical, number_text, pointer_get, pointer_join, pointers_replace, ts_text

_sha256 = hashlib.sha256
_orjson_dumps = orjson.dumps


def _loads(stored: bytes):
    try:
        return orjson.loads(stored)
    except orjson.JSONDecodeError:  # a number beyond a double (see runs.store.payload_loads)
        return json.loads(stored)


_SORTED = orjson.OPT_SORT_KEYS
# orjson's sorted, compact output ``raw`` is taken as the payload's RFC 8785 bytes only where that is
# proved, token by token, whatever orjson version wrote it (tests/runs/test_canonical_rfc8785.py
# holds both to the ``rfc8785`` package):
# - strings: orjson escapes exactly what RFC 8785 escapes, the same way (", \, \b \t \n \f \r, other
#   controls as \u00xx) and writes everything else as UTF-8 (tested, not assumed: a difference
#   would show in those tests, never silently);
# - keys: sorted by code point, which is RFC 8785's UTF-16 order unless a key holds a character
#   beyond U+FFFF (UTF-8 lead bytes F0-F4), so any such byte takes the exact encoder;
# - integers: written in full by both (``runs.verify._canonical``);
# - every other number token (one with a fraction or an exponent) is compared with RFC 8785's
#   own text for its value (``runs.verify.number_text``), and any difference ("1e+16", "1.0",
#   "-0.0") takes the exact encoder.
# The scans run in C (``translate``, ``find``); Python looks only at candidates, and a token's
# verdict is kept (``_tokens``), so a batch of model turns each with a cost like 0.0031 checks it once.
_CLASS = bytearray(b"x" * 256)
for _c in b"0123456789":
    _CLASS[_c] = 48  # "0"
_CLASS[46], _CLASS[101], _CLASS[69], _CLASS[43], _CLASS[45] = 46, 101, 101, 43, 43  # . e E + -
for _c in b":,[":
    _CLASS[_c] = 60  # "<": what may stand before a number in compact JSON
for _c in b"}]":
    _CLASS[_c] = 62  # ">": what may stand after one, with ","
_CLASS = bytes(_CLASS)
_TOKEN_END = re.compile(rb"[0.e+]*")
_BEFORE = frozenset(b"<")
_AFTER = frozenset(b"<>")
_tokens: dict[bytes, bool] = {}


def _token_exact(token: bytes) -> bool:
    ok = _tokens.get(token)
    if ok is None:
        try:
            ok = number_text(float(token)).encode() == token
        except ValueError:  # not a number after all (text inside a string): nothing to compare
            ok = True
        if len(_tokens) > 4096:
            _tokens.clear()
        _tokens[token] = ok
    return ok


def _numbers_exact(raw: bytes) -> bool:
    """Whether every number token with a fraction or an exponent in ``raw`` is written as RFC 8785
    writes it. A candidate is a digit followed by "." and a digit, or by an exponent; one inside a
    string is compared too, which can only send the payload to the exact encoder."""
    classes = raw.translate(_CLASS)
    for needle in (b"0.0", b"0e"):
        i = classes.find(needle)
        while i >= 0:
            start = i
            while start and classes[start - 1] in (48, 43):  # back over the digits and the sign
                start -= 1
            end = _TOKEN_END.match(classes, i).end()
            if (start == 0 or classes[start - 1] in _BEFORE) and (end == len(classes) or classes[end] in _AFTER):
                if not _token_exact(raw[start:end]):
                    return False
            i = classes.find(needle, end)
    return True


def _orjson_exact(raw: bytes) -> bool:
    """Whether orjson's sorted output ``raw`` is certainly RFC 8785's (see above)."""
    if not (raw.isascii() or not (240 in raw or 241 in raw or 242 in raw or 243 in raw or 244 in raw)):
        return False  # a character beyond U+FFFF sorts differently by UTF-16 unit
    return _numbers_exact(raw)


def canonical_fast(value) -> bytes:
    """``canonical_json(value)`` for decoded JSON, through orjson where that is the same bytes."""
    try:
        raw = orjson.dumps(value, option=_SORTED)
    except TypeError:  # an integer beyond 64 bits
        return canonical_json(value)
    return raw if _orjson_exact(raw) else canonical_json(value)


def payload_canonical(payload: dict, stored: bytes) -> bytes:
    """The payload's RFC 8785 bytes. ``stored`` is the text the store writes for it (the slow path
    decodes that, so the hash covers exactly what a later read returns, e.g. keys that were not
    strings in memory are strings there)."""
    try:
        raw = orjson.dumps(payload, option=_SORTED)
    except TypeError:
        return canonical_json(_loads(stored))
    return raw if _orjson_exact(raw) else canonical_json(_loads(stored))


def _ts_text(ts: datetime) -> str:
    """``runs.verify.ts_text`` (the definition), through ``isoformat`` where that is the same text:
    strftime costs about a microsecond, and the importer encodes one time per event."""
    if ts.tzinfo is UTC and ts.year >= 1000:  # the store's and the importer's times
        return ts.isoformat(timespec="microseconds")[:-6] + "Z"
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=UTC)
    elif ts.utcoffset():
        ts = ts.astimezone(UTC)
    text = ts.isoformat(timespec="microseconds")
    # strftime's %Y does not pad a year below 1000 to four digits; isoformat does.
    if ts.year < 1000 or not text.endswith("+00:00"):
        return ts_text(ts)
    return text[:-6] + "Z"


# The tail of the last event framed, as one tuple so that threads never see one event's time
# with another's text: (ts, type, v, the bytes after the seq).
_last_tail: tuple = (None, None, None, b"")
# The frame's end after the time, by (type, version): '","type":"model_turn","v":2}'.
_type_tails: dict[tuple[str, int], bytes] = {}


def ts_texts(tss: list[datetime]) -> list[bytes]:
    """Each time's text in the chain's frame (``runs.verify.ts_text``), as UTF-8: RFC 3339 in UTC,
    which PostgreSQL reads back as the same timestamptz."""
    return [_ts_text(ts).encode() for ts in tss]


def _type_tail(type: str, v: int) -> bytes:
    """The frame's end after the time for (type, v), kept in ``_type_tails``."""
    if len(_type_tails) > 256:
        _type_tails.clear()
    frame = event_canonical(seq=0, type=type, ts="", v=v, payload_canonical=b"")
    type_tail = _type_tails[(type, v)] = frame[frame.index(b'"",') + 2 :]
    return type_tail


def _tail(type: str, ts: datetime, v: int) -> bytes:
    """What follows the seq in the event's canonical bytes (``event_canonical``'s frame): the ts,
    type and v. A batch's events mostly share the append's clock reading, so the last tail is
    kept; an import's events each have their own time, whose text is the only part built per
    event (a time never needs an escape)."""
    global _last_tail
    last_ts, last_type, last_v, tail = _last_tail
    if ts is not last_ts or type != last_type or v != last_v:
        type_tail = _type_tails.get((type, v)) or _type_tail(type, v)
        tail = b',"ts":"' + _ts_text(ts).encode() + b'"' + type_tail
        _last_tail = (ts, type, v, tail)
    return tail


def _frame(seq: int, type: str, ts: datetime, v: int) -> bytes:
    """What follows the payload in the event's canonical bytes: the seq, then ``_tail``."""
    return b',"seq":%d' % seq + _tail(type, ts, v)


# --- sealed values -------------------------------------------------------------------------------

_always = frozenset({KEY_SECRET_FIELD})
_provider: Callable[[], frozenset[str]] = lambda: _always  # noqa: E731
_needles: tuple[frozenset[str], tuple[bytes, ...]] = (frozenset(), ())


def sealed_names_provider_set(provider: Callable[[], frozenset[str]]) -> None:
    """Install the function naming the sensitive fields (the recovery layer's policies). It is
    called once per append, so it must be cheap (cached)."""
    global _provider
    _provider = provider


def sealed_names() -> frozenset[str]:
    """The field names whose values the next append seals: the sensitive ones, and the key secret."""
    return sealing_now()[0]


def _needles_for(names: frozenset[str]) -> tuple[bytes, ...]:
    global _needles
    cached, needles = _needles
    if cached != names:
        # '"name' also finds the name quoted inside JSON kept as text ('\\"name\\"').
        needles = tuple(b'"' + n.encode() for n in sorted(names))
        _needles = (names, needles)
    return needles


def seal_pointers(payload, names: frozenset[str]) -> list[str]:
    """JSON Pointers of the values to seal: each value (not null) under a key in ``names``, and each
    string holding JSON that names one (a call's signature), whole."""
    out: list[str] = []

    def walk(v, path):
        if isinstance(v, dict):
            for k, x in v.items():
                if k in names and x is not None:
                    out.append(pointer_join((*path, k)))
                else:
                    walk(x, (*path, k))
        elif isinstance(v, list):
            for i, x in enumerate(v):
                walk(x, (*path, i))
        elif isinstance(v, str) and ("{" in v or "[" in v) and _names_in_json_text(v, names):
            out.append(pointer_join(path))

    walk(payload, ())
    if out:
        # Text elsewhere in the same payload that quotes a sealed value ("Reading ledger 4010" beside
        # the call's account 4010) is sealed whole too, so a bundle can mask it without hiding the
        # event. Case is ignored; a short value matches inside longer text as well (sealing more
        # than a screen masks costs nothing: a bundle shows a sealed value wherever it may).
        quoted = {t.lower() for t in (_text(pointer_get(payload, p)) for p in out) if t}
        sealed = set(out)

        def texts(v, path):
            if isinstance(v, dict):
                for k, x in v.items():
                    texts(x, (*path, k))
            elif isinstance(v, list):
                for i, x in enumerate(v):
                    texts(x, (*path, i))
            elif isinstance(v, str):
                low = v.lower()
                if any(q in low for q in quoted):
                    p = pointer_join(path)
                    if p not in sealed and not any(p.startswith(s + "/") for s in sealed):
                        out.append(p)

        texts(payload, ())
    return out


def _text(value) -> str:
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return json.dumps(value)
    return ""


def _names_in_json_text(text: str, names: frozenset[str]) -> bool:
    start = min((i for i in (text.find("{"), text.find("[")) if i >= 0), default=-1)
    try:
        inner, _ = json.JSONDecoder().raw_decode(text, start)
    except ValueError:
        return False
    return bool(seal_pointers(inner, names))


def event_canon(
    *, seq: int, type: str, ts: datetime, v: int, payload: dict, stored: bytes, sealing: tuple[frozenset[str], tuple[bytes, ...]], stored_sorted: bool = False
) -> tuple[bytes, dict[str, str] | None]:
    """The event's canonical bytes as chained, and the salts (hex, by JSON Pointer) of its sealed
    values or None.

    ``sealing`` from ``sealing_now()``, once per append. ``stored_sorted``: ``stored`` is orjson's
    sorted encoding of ``payload`` (``orjson.dumps(payload, option=OPT_SORT_KEYS)``, which the store
    writes), so the common case frames it as it is, with no second encoding."""
    names, needles = sealing
    for n in needles:
        if stored.find(n) >= 0:  # find: one C scan, cheaper than ``in`` for a bytes needle
            break
    else:
        # The common case, inlined (this runs once per event appended or imported): orjson's
        # sorted bytes where they are RFC 8785's (see _orjson_exact), framed as event_canonical
        # frames them.
        if stored_sorted:
            raw = stored
        else:
            try:
                raw = _orjson_dumps(payload, option=_SORTED)
            except TypeError:
                raw = b"+"  # sends it to the exact encoder below
        if not _orjson_exact(raw):
            raw = canonical_json(_loads(stored))
        return b'{"payload":' + raw + _frame(seq, type, ts, v), None
    # It names a sealed field (or merely contains the text): the exact path, on what a read returns.
    decoded = _loads(stored)
    pointers = seal_pointers(decoded, names)
    if not pointers:
        return event_canonical(seq=seq, type=type, ts=_ts_text(ts), v=v, payload_canonical=canonical_json(decoded)), None
    salts = {p: os.urandom(16) for p in pointers}
    commitments = {p: _sha256(salt + canonical_fast(pointer_get(decoded, p))).digest() for p, salt in salts.items()}
    chained = pointers_replace(decoded, sorted(commitments), SEALED)
    sealed = canonical_json({p: c.hex() for p, c in commitments.items()})
    canon = event_canonical(seq=seq, type=type, ts=_ts_text(ts), v=v, payload_canonical=canonical_fast(chained), sealed_canonical=sealed)
    return canon, {p: s.hex() for p, s in salts.items()}


def event_canons(
    *,
    first_seq: int,
    types: list[str],
    tss: list[datetime],
    vs: list[int],
    payloads: list[dict],
    stored: list[bytes],
    stored_sorted: bool,
    sealing: tuple[frozenset[str], tuple[bytes, ...]],
) -> tuple[list[bytes], list[tuple[int, dict[str, str]]]]:
    """``event_canon`` for consecutive events (an append's batch, an import's chunk) at seqs
    ``first_seq, first_seq + 1, ...``: their canonical bytes, and (seq, salts) of those with sealed values.

    ``stored_sorted``: every text in ``stored`` is orjson's sorted encoding of its payload. Then the
    scans that send a payload to the exact or the sealing path run once over the whole batch (one
    C scan each, where per event each would cost a call), and only when one finds something are the
    events looked at one by one."""
    names, needles = sealing
    # A NUL never occurs in JSON text, so no mark spans two events.
    if stored_sorted:
        joined = b"\x00".join(stored)
        per_event = not _orjson_exact(joined) or any(joined.find(n) >= 0 for n in needles)
    else:
        per_event = True
    canons: list[bytes] = []
    seals: list[tuple[int, dict[str, str]]] = []
    if per_event:
        for i, raw in enumerate(stored):
            c, salts = event_canon(seq=first_seq + i, type=types[i], ts=tss[i], v=vs[i], payload=payloads[i], stored=raw, sealing=sealing, stored_sorted=stored_sorted)
            canons.append(c)
            if salts is not None:
                seals.append((first_seq + i, salts))
        return canons, seals
    # The common case: each payload's stored text is its RFC 8785 bytes; frame them all.
    ts0, v0 = tss[0], vs[0]
    if tss.count(ts0) == len(tss) and vs.count(v0) == len(vs):
        # An append's batch: one clock reading, one version; a tail per type, no Python per event.
        by_type = {type_: _tail(type_, ts0, v0) for type_ in set(types)}
        tails = list(map(by_type.__getitem__, types))
    elif vs.count(v0) == len(vs):
        # An import's chunk: one version, a few types, a time each; each tail is its time's text
        # between the frame's fixed parts, the type's part looked up once per type.
        ends = {type_: b'"' + (_type_tails.get((type_, v0)) or _type_tail(type_, v0)) for type_ in set(types)}
        tails = [b',"ts":"' + text + ends[type_] for text, type_ in zip(ts_texts(tss), types, strict=True)]
    else:
        tails = [_tail(type_, ts, v) for ts, type_, v in zip(tss, types, vs)]
    return [b'{"payload":' + raw + b',"seq":%d' % (first_seq + i) + tail for i, (raw, tail) in enumerate(zip(stored, tails, strict=True))], seals


def seal_commitments(payload, salts: dict[str, bytes]) -> dict[str, bytes]:
    """Each sealed value's commitment, by pointer (KeyError: a pointer names no value)."""
    return {p: commitment(salt, pointer_get(payload, p)) for p, salt in salts.items()}


# (what the provider returned, what sealing_now made of it): the provider returns the same set
# until the policies change, so an append builds nothing.
_sealing: tuple[frozenset[str] | None, tuple[frozenset[str], tuple[bytes, ...]]] = (None, (frozenset(), ()))


def sealing_now() -> tuple[frozenset[str], tuple[bytes, ...]]:
    """The names sealed now, and the byte strings whose presence in an encoded payload sends it
    to the sealing path."""
    global _sealing
    provided = _provider()
    seen, sealing = _sealing
    if provided is not seen:
        names = provided | _always
        sealing = (names, _needles_for(names))
        _sealing = (provided, sealing)
    return sealing
