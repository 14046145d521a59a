"""The digest the append path chains for each event (docs/evidence.md), fast, and its sealed values.

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
from collections.abc import Callable
from datetime import UTC, datetime

import orjson

from runs.identity import KEY_SECRET_FIELD
from runs.verify import SEALED, canonical_json, commitment, event_canonical, pointer_get, pointer_join, pointers_replace, ts_text

_sha256 = hashlib.sha256


def _loads(stored: bytes):
    try:
        return orjson.loads(stored)
    except orjson.JSONDecodeError:  # a number beyond a double (see runs.store.payload_loads)
        return json.loads(stored)


_SORTED = orjson.OPT_SORT_KEYS
# orjson's sorted output is already RFC 8785's for strings, integers and most doubles. It differs
# for a double it writes with an exponent ("1e-7", "1e+16") or as a whole number ("1.0"), and sorts
# keys by code point where RFC 8785 sorts by UTF-16 unit (different only beside a character beyond
# U+FFFF, whose UTF-8 begins with F0-F4). Any of those marks sends the payload to the slow, exact
# encoder; the marks may also occur inside a string, which costs time, never correctness
# (tests/runs/test_chain.py checks every kind of double against both encoders).


def _orjson_exact(raw: bytes) -> bool:
    """Whether orjson's sorted output ``raw`` is certainly RFC 8785's (the marks above absent)."""
    if b"e+" in raw or b"e-" in raw or (b".0" in raw and (b".0," in raw or b".0}" in raw or b".0]" in raw)):
        return False
    return raw.isascii() or not (b"\xf0" in raw or b"\xf1" in raw or b"\xf2" in raw or b"\xf3" in raw or b"\xf4" in raw)


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
    # Plain ``in`` tests: each is one C scan; a generator over the marks cost more than the encoding.
    if b"e+" in raw or b"e-" in raw or (b".0" in raw and (b".0," in raw or b".0}" in raw or b".0]" in raw)):
        return canonical_json(_loads(stored))
    if not raw.isascii() and (b"\xf0" in raw or b"\xf1" in raw or b"\xf2" in raw or b"\xf3" in raw or b"\xf4" in raw):
        return canonical_json(_loads(stored))
    return raw


# The last timestamp encoded, as one tuple so that threads never see a time with another's text.
_last_ts: tuple = (None, "")


def _ts(ts: datetime) -> str:
    global _last_ts
    cached_ts, text = _last_ts
    if ts is not cached_ts:  # a batch's events mostly share one clock reading
        text = ts_text(ts if ts.tzinfo is not None else ts.replace(tzinfo=UTC))
        _last_ts = (ts, text)
    return text


_orjson_dumps = orjson.dumps


def _beyond_bmp(raw: bytes) -> bool:
    return b"\xf0" in raw or b"\xf1" in raw or b"\xf2" in raw or b"\xf3" in raw or b"\xf4" in raw


def _whole_double(raw: bytes) -> bool:
    """Whether ``raw`` may hold a double orjson wrote as ``N.0`` (RFC 8785 writes ``N``): a ``.0``
    before a comma or a closing bracket. One scan, then a look at each (rare) ``.0``."""
    i = raw.find(b".0")
    while i >= 0:
        if raw[i + 2 : i + 3] in (b",", b"}", b"]"):
            return True
        i = raw.find(b".0", i + 2)
    return False


_frames: dict[tuple, bytes] = {}


def _frame(seq: int, type: str, ts: str, v: int) -> bytes:
    """What follows the payload in the event's canonical bytes: the seq, then (cached per time, type
    and version: a batch's events mostly share them) the ts, type and v."""
    tail = _frames.get((ts, type, v))
    if tail is None:
        if len(_frames) > 256:
            _frames.clear()
        tail = _frames[(ts, type, v)] = event_canonical(seq=0, type=type, ts=ts, v=v, payload_canonical=b"")[len(b'{"payload":,"seq":0') :]
    return b',"seq":%d' % seq + tail


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
    return _provider() | _always


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


def event_digest(*, seq: int, type: str, ts: datetime, v: int, payload: dict, stored: bytes, sealing: tuple[frozenset[str], tuple[bytes, ...]]) -> tuple[bytes, dict[str, str] | None]:
    """The event's chain digest, and the salts (hex, by JSON Pointer) of its sealed values or None.

    ``sealing`` from ``sealing_now()``, once per append."""
    names, needles = sealing
    for n in needles:
        if n in stored:
            break
    else:
        # The common case, inlined (this runs once per event appended): orjson's sorted bytes where
        # they are RFC 8785's (see payload_canonical), framed as event_canonical frames them.
        try:
            raw = _orjson_dumps(payload, option=_SORTED)
        except TypeError:
            raw = b"+"  # sends it to the exact encoder below
        if b"+" in raw or b"e-" in raw or _whole_double(raw) or (not raw.isascii() and _beyond_bmp(raw)):
            raw = canonical_json(_loads(stored))
        h = _sha256(b'{"payload":')
        h.update(raw)
        h.update(_frame(seq, type, _ts(ts), v))
        return h.digest(), None
    # It names a sealed field (or merely contains the text): the exact path, on what a read returns.
    decoded = _loads(stored)
    pointers = seal_pointers(decoded, names)
    if not pointers:
        return _sha256(event_canonical(seq=seq, type=type, ts=_ts(ts), v=v, payload_canonical=canonical_json(decoded))).digest(), None
    salts = {p: os.urandom(16) for p in pointers}
    commitments = {p: _sha256(salt + canonical_fast(pointer_get(decoded, p))).digest() for p, salt in salts.items()}
    chained = pointers_replace(decoded, sorted(commitments), SEALED)
    sealed = canonical_json({p: c.hex() for p, c in commitments.items()})
    canon = event_canonical(seq=seq, type=type, ts=_ts(ts), v=v, payload_canonical=canonical_fast(chained), sealed_canonical=sealed)
    return _sha256(canon).digest(), {p: s.hex() for p, s in salts.items()}


def seal_commitments(payload, salts: dict[str, bytes]) -> dict[str, bytes]:
    """Each sealed value's commitment, by pointer (KeyError: a pointer names no value)."""
    return {p: commitment(salt, pointer_get(payload, p)) for p, salt in salts.items()}


def sealing_now() -> tuple[frozenset[str], tuple[bytes, ...]]:
    """The names sealed now, and the byte strings whose presence in an encoded payload sends it
    to the sealing path."""
    names = sealed_names()
    return names, _needles_for(names)
