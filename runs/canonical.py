"""The canonical bytes the append path hashes for each event (docs/evidence.md), fast.

``runs.verify`` holds the definition (one exact encoder, shared with the offline verifier); this
module takes orjson's sorted output where it is provably the same bytes, and the exact encoder
everywhere else. The store imports it; runs/chain.py builds the backfill and the check on it.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import orjson

from runs.verify import canonical_json, event_canonical, ts_text


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


def event_canonical_bytes(*, seq: int, type: str, ts: datetime, v: int, payload: dict, stored: bytes) -> bytes:
    """An event's canonical bytes as the append hashes them (``ts`` naive means UTC)."""
    global _last_ts
    cached_ts, text = _last_ts
    if ts is not cached_ts:  # a batch's events mostly share one clock reading
        text = ts_text(ts if ts.tzinfo is not None else ts.replace(tzinfo=UTC))
        _last_ts = (ts, text)
    return event_canonical(seq=seq, type=type, ts=text, v=v, payload_canonical=payload_canonical(payload, stored))
