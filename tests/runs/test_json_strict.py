"""The importer's fast strict decoder gives exactly the strict decoder's answer: the same value,
or a refusal (with the strict decoder's own message)."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runs import json_strict
from runs.json_strict import JsonRefused, _proved_py, json_loads_strict, json_loads_strict_bytes

try:
    from runs._chain import strict_proved as _compiled_proof
except ImportError:  # not built here: the Python proof alone is tested
    _compiled_proof = None

PROOFS = {"python": _proved_py, "compiled": _compiled_proof}


@pytest.fixture(params=list(PROOFS))
def proof(request, monkeypatch):
    """The byte proof of ``json_loads_strict_bytes``, in C and in Python: each must give the answers."""
    fn = PROOFS[request.param]
    if fn is None:
        pytest.skip("runs._chain was not built here (no C compiler or OpenSSL headers at install)")
    monkeypatch.setattr(json_strict, "_strict_proved", fn)
    return fn


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


@pytest.mark.parametrize("which", list(PROOFS))
@settings(max_examples=400, deadline=None)
@given(value=_json, sep=st.sampled_from([":", ": ", " : ", "\t:"]))
def test_it_agrees_with_the_strict_decoder_on_generated_documents(which, value, sep):
    if PROOFS[which] is None:
        pytest.skip("runs._chain was not built here")
    raw = _encode(value, sep).encode("utf-8", "surrogatepass")
    before, json_strict._strict_proved = json_strict._strict_proved, PROOFS[which]
    try:
        assert _answer(json_loads_strict_bytes, raw) == _answer(_strict, raw)
    finally:
        json_strict._strict_proved = before


_EDGES = [
    b'{"a": 1}', b'{"a":1}', b'"', b'""', b'"x"', b'{"a" :1}', b'{"a"\t:1}', b'{"a"\r:1}', b'{"a"\n:1}', b'["x" ]',
    b'{"n": 1234567890123456789}', b'{"n": 123456789012345678}', b'{"n": 0.1234567890123456789}', b'{"n": 1e1234567890123456789}',
    b'{"s": "a\\":1"}', b'{"s": "\\\\"}', b'{"s": "\\u0000"}', b'{"s": "\\u00000"}', b'{"s": "\\u000"}',
    b'{"\\":": 1}', b'[{"a": [], "b": {}}, [[{"c": 0}]]]', b'[]', b'1', b'null', b'{"a": {"b": {"c": {"d": [1, {"e": 2}]}}}}',
]


@pytest.mark.skipif(_compiled_proof is None, reason="runs._chain was not built here")
@pytest.mark.parametrize("raw", HOSTILE[:-1] + _EDGES)
def test_the_compiled_proof_answers_as_the_python_one(raw):
    try:
        value = json.loads(raw)  # any decoding: the proof is a function of the bytes and the value
    except ValueError:
        value = None
    assert _compiled_proof(raw, value) == _proved_py(raw, value)


@settings(max_examples=400, deadline=None)
@given(value=_json, sep=st.sampled_from([":", ": ", " : ", "\t:"]))
def test_the_compiled_proof_answers_as_the_python_one_on_generated_documents(value, sep):
    if _compiled_proof is None:
        pytest.skip("runs._chain was not built here")
    raw = _encode(value, sep).encode("utf-8", "surrogatepass")
    try:
        decoded = json.loads(raw, object_pairs_hook=dict)
    except ValueError:
        decoded = None
    assert _compiled_proof(raw, decoded) == _proved_py(raw, decoded)
