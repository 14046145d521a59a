"""A call's signature is json.dumps's text (sorted keys, no spaces, raw UTF-8), whichever encoder
writes it: ``reckon_client.identity.signature`` takes orjson, where it is installed, for the values
it writes identically. Checked here against the definition it stands in for, on generated values
and on the cases where the two encoders differ."""

from __future__ import annotations

import enum
import json
import uuid
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reckon_client.identity import signature


def _defined(name, arguments) -> str:
    return name + ":" + json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _outcome(fn, *args):
    try:
        return ("ok", fn(*args))
    except (TypeError, ValueError, RecursionError) as exc:
        return ("raises", type(exc))


# Every code point, surrogates included (json writes a lone one, orjson refuses it), integers well
# beyond 64 bits, every kind of double, keys of other types than strings.
_leaves = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=2**63 - 2, max_value=2**64 + 2)
    | st.integers(min_value=-(2**63) - 2, max_value=-(2**63) + 2)
    | st.floats()
    | st.text(alphabet=st.characters(), max_size=6)
)
_keys = st.text(alphabet=st.characters(), max_size=4) | st.integers() | st.booleans() | st.none() | st.floats(allow_nan=False)
_values = st.recursive(
    _leaves,
    lambda inner: st.lists(inner, max_size=3) | st.lists(inner, max_size=3).map(tuple) | st.dictionaries(_keys, inner, max_size=3),
    max_leaves=10,
)


@settings(max_examples=600, deadline=None)
@given(arguments=_values)
def test_the_signature_is_json_dumps_text_for_any_arguments(arguments):
    assert _outcome(signature, "tool", arguments) == _outcome(_defined, "tool", arguments)


class Colour(enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


class Tag(str):
    pass


@dataclass
class Point:
    x: int


def _circular():
    a: list = []
    a.append(a)
    return a


def _deep(n):
    value: list = []
    for _ in range(n):
        value = [value]
    return value


@pytest.mark.parametrize(
    "arguments",
    [
        {"n": 1e16, "m": 1e-7, "w": 1.0, "x": float("nan"), "y": float("inf")},
        {"big": 2**64, "small": -(2**63) - 1, "edge": 2**63 - 1},
        {"s": "\ud800"},
        {1: "one", "a": 2},
        {"t": (1, "x", None)},
        {"c": '\x00\x1f\x7f\u2028 \\ " /'},
        {"é": 1, "e": 2, "\U0001f600": 3, "\uffff": 4},
        {"level": Level.HIGH},
        {"tag": Tag("acme")},
        {"colour": Colour.RED},
        {"id": uuid.UUID(int=1)},
        {"p": Point(1)},
        _deep(300),
        _circular(),
        "a bare string",
        7,
    ],
    ids=lambda a: type(a).__name__,
)
def test_the_signature_is_json_dumps_text_where_the_encoders_differ(arguments):
    assert _outcome(signature, "tool", arguments) == _outcome(_defined, "tool", arguments)
