"""The chain's canonical bytes do not depend on how orjson formats numbers or strings: the fast path
(orjson's sorted text where every number token in it is RFC 8785's) and the exact encoder both give
the ``rfc8785`` package's bytes, for the values where a JSON library's formatting differs."""

from datetime import UTC, datetime

import orjson
import pytest
import rfc8785

from runs.canonical import _orjson_exact, canonical_fast, event_canon, event_canons, payload_canonical
from runs.verify import canonical_json, number_text

AWKWARD_NUMBERS = [1e16, 1e21, 1e20, 1e-6, 1e-7, -0.0, 0.0, 5e-324, 1.7976931348623157e308, 0.1, 1.0, 100.0, -1.5e-10, 123456789012345.6, 2.0**53, float(2**53 + 1)]
AWKWARD_TEXTS = ['q"uote', "back\\slash", "\x00\x01\x1f", "\b\t\n\f\r", "\x7f", "\u2028\u2029", "é", "\U0001f600", "a\U00010000b", "/"]


def _both(value) -> bytes:
    """The fast path's bytes, checked equal to the exact encoder's first."""
    exact = canonical_json(value)
    assert canonical_fast(value) == exact
    assert payload_canonical(value, orjson.dumps(value, option=orjson.OPT_SORT_KEYS)) == exact
    return exact


@pytest.mark.parametrize("x", AWKWARD_NUMBERS, ids=repr)
def test_a_double_is_written_as_rfc8785_writes_it(x):
    assert _both({"x": x}) == rfc8785.dumps({"x": x})
    assert _both([x, {"y": [x]}]) == rfc8785.dumps([x, {"y": [x]}])
    assert _both(x) == rfc8785.dumps(x)
    assert number_text(x).encode() == rfc8785.dumps(x)


def test_orjson_writes_some_of_them_otherwise_and_the_fast_path_notices():
    # Why the number rule is checked token by token: orjson's text for these is not RFC 8785's.
    for x in (1e16, -0.0, 1.0):
        raw = orjson.dumps({"x": x})
        assert raw != rfc8785.dumps({"x": x})
        assert not _orjson_exact(raw)


def test_an_integer_beyond_a_double_is_written_in_full():
    # 2**53 + 1 has no double: rfc8785 refuses it, the chain writes every digit (runs.verify), so a
    # hash never ignores one. As a double it is 2**53, which both write alike.
    with pytest.raises(rfc8785.IntegerDomainError):
        rfc8785.dumps(2**53 + 1)
    assert _both({"n": 2**53 + 1}) == b'{"n":9007199254740993}'
    assert _both({"n": 2**53 - 1}) == rfc8785.dumps({"n": 2**53 - 1})


@pytest.mark.parametrize("text", AWKWARD_TEXTS, ids=ascii)
def test_strings_and_keys_are_escaped_and_sorted_as_rfc8785_does(text):
    doc = {text: text, "a" + text: [text], "\uffff": 1, "\U0001f600k": 2}
    assert _both(doc) == rfc8785.dumps(doc)


def test_a_number_like_text_inside_a_string_is_left_as_it_is():
    doc = {"at": "12:00:00.000100", "v": "1e5", "list": "[1.0,2]", "n": 3}
    assert _both(doc) == rfc8785.dumps(doc)


def test_an_event_and_a_batch_frame_the_same_bytes_whichever_path_they_take():
    ts = datetime(2026, 3, 1, 12, 0, 0, 5, tzinfo=UTC)
    payloads = [{"cost": 1e16, "n": -0.0}, {"cost": 0.0031, "t": "\U0001f600"}, {"k": 2**53 + 1}, {"plain": "text"}]
    stored = [orjson.dumps(p, option=orjson.OPT_SORT_KEYS) for p in payloads]
    sealing = (frozenset(), ())
    singles = [event_canon(seq=5 + i, type="user_message", ts=ts, v=2, payload=p, stored=s, sealing=sealing, stored_sorted=True)[0] for i, (p, s) in enumerate(zip(payloads, stored))]
    batch, _ = event_canons(first_seq=5, types=["user_message"] * 4, tss=[ts] * 4, vs=[2] * 4, payloads=payloads, stored=stored, stored_sorted=True, sealing=sealing)
    assert batch == singles
    for i, (p, c) in enumerate(zip(payloads, singles)):
        if p != {"k": 2**53 + 1}:
            assert c == rfc8785.dumps({"payload": p, "seq": 5 + i, "ts": "2026-03-01T12:00:00.000005Z", "type": "user_message", "v": 2})
