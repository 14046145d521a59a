"""The importer's fast strict decoder gives exactly the strict decoder's answer: the same value,
or a refusal (with the strict decoder's own message)."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runs.json_strict import JsonRefused, _proved_py, json_loads_strict, json_loads_strict_bytes


@pytest.fixture
def proof():
    """The byte proof of ``json_loads_strict_bytes``."""
    return _proved_py


def _answer(fn, raw):
    try:
        return ("ok", fn(raw))
    except JsonRefused as exc:
        return ("refused", str(exc))


def _strict(raw: bytes):
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise JsonRefused(f"not UTF-8 (byte {exc.start + 1})") from None
    return json_loads_strict(text)


HOSTILE = [
    b'{"a": 1, "a": 2}',
    b'{"a": 1, "a" : 2}',
    b'{"a": {"b": 1, "b\\u0000": 2}}',
    b'{"a": "x\\u0000y"}',
    b'{"a\\u0000": 1}',
    b'{"a": 18446744073709551616}',
    b'{"a": -9223372036854775809}',
    b'{"a": 9223372036854775807}',
    b'{"a": "\\ud800"}',
    b'{"\\udfff": 1}',
    b'{"a": NaN}',
    b'{"a": 1e400}',
    b'\xef\xbb\xbf{"a": 1}',
    b'{"a": "caf\xe9"}',
    b'{"a": "\\":", "a": 1}',
    b'{"a": "\\":", "b": {"c": 1, "c": 2}}',
    b'[1, 2, {"x": [{"y": 1, "y": 1}]}]',
    b'{"b\\\\": 1, "a": 1, "a": 2}',
    b'{"s": "n:{\\"a\\":1}", "a": 1, "a": 2}',
    b'{"s": "n:{\\"a\\":1}", "a": 1}',
    b'{"a": 1.0, "b": -0, "c": 1E5, "d": "\xf0\x9f\x98\x80"}',
    b"[" * 5000 + b"]" * 5000,
]


@pytest.mark.parametrize("raw", HOSTILE, ids=range(len(HOSTILE)))
def test_it_answers_each_hostile_document_as_the_strict_decoder_does(raw, proof):
    assert _answer(json_loads_strict_bytes, raw) == _answer(_strict, raw)


def test_it_refuses_a_duplicate_key_hidden_behind_a_colon_in_a_string(proof):
    with pytest.raises(JsonRefused, match="appears twice"):
        json_loads_strict_bytes(b'{"k": "\\":", "k": 2}')


_json = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.lists(st.tuples(st.sampled_from(["a", "b", "\x00", "\ud800", ":", '":', "b\\", 'q\"']), inner), max_size=4),
    max_leaves=12,
)


def _encode(value, sep) -> str:
    # Lists of pairs become objects, duplicate keys kept as written.
    if isinstance(value, list) and value and all(isinstance(x, tuple) for x in value):
        return "{" + ", ".join(json.dumps(k) + sep + _encode(v, sep) for k, v in value) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_encode(v, sep) for v in value) + "]"
    return json.dumps(value)


@settings(max_examples=400, deadline=None)
@given(value=_json, sep=st.sampled_from([":", ": ", " : ", "\t:"]))
def test_it_agrees_with_the_strict_decoder_on_generated_documents(value, sep):
    raw = _encode(value, sep).encode("utf-8", "surrogatepass")
    assert _answer(json_loads_strict_bytes, raw) == _answer(_strict, raw)


