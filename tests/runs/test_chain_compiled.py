"""The chain's batch steps, compiled (runs/_chain.c) and in Python (runs/canonical.py), against each
other and against the definition: the event framed around RFC 8785's payload bytes, as an
independent encoder writes them, and each link sha256(previous hash || canonical bytes)."""

from __future__ import annotations

import hashlib
from datetime import datetime, timezone

import orjson
import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from runs import canonical
from tests.runs.test_chain import json_values

compiled = pytest.importorskip("runs._chain", reason="runs._chain was not built here (no C compiler or OpenSSL headers at install)")

TS = datetime(2026, 11, 30, 12, 0, 0, 123456, tzinfo=timezone.utc)
payloads = st.lists(st.dictionaries(st.text(max_size=6), json_values, max_size=5), min_size=1, max_size=8)


def _expected_canonical(seq: int, type_: str, payload: dict) -> bytes:
    frame = b',"seq":%d,"ts":"2026-11-30T12:00:00.123456Z","type":"%s","v":2}' % (seq, type_.encode())
    return b'{"payload":' + rfc8785.dumps(payload) + frame


def _event_canons(batch: list[dict], first_seq: int) -> tuple[list[bytes], list]:
    types = ["user_message" if i % 3 else "model_turn" for i in range(len(batch))]
    return canonical.event_canons(
        first_seq=first_seq,
        types=types,
        tss=[TS] * len(batch),
        vs=[2] * len(batch),
        payloads=batch,
        stored=[orjson.dumps(p, option=orjson.OPT_SORT_KEYS) for p in batch],
        stored_sorted=True,
        sealing=(frozenset(), ()),
    )


@pytest.fixture(params=["compiled", "python"])
def implementation(request, monkeypatch):
    if request.param == "python":
        monkeypatch.setattr(canonical, "_canonicals", canonical._canonicals_py)
        monkeypatch.setattr(canonical, "_canonical_one", None)
        monkeypatch.setattr(canonical, "_links", canonical._links_py)
        monkeypatch.setattr(canonical, "_links_framed", canonical._links_framed_py)
        monkeypatch.setattr(canonical, "_links_parts", canonical._links_parts_py)
        monkeypatch.setattr(canonical, "_plain", canonical._plain_py)
    return request.param


def test_the_compiled_steps_are_the_ones_in_use():
    assert canonical.COMPILED
    assert canonical._canonicals is compiled.canonicals and canonical._links is compiled.links and canonical._plain is compiled.plain
    assert canonical._links_framed is compiled.links_framed and canonical._canonical_one is compiled.canonical_one
    assert canonical._links_parts is compiled.links_parts


@settings(max_examples=300, deadline=None)
@given(batch=payloads, first_seq=st.integers(min_value=1, max_value=2**62))
def test_a_batch_frames_as_the_definition_says(batch, first_seq):
    for use_python in (False, True):
        with pytest.MonkeyPatch.context() as mp:
            if use_python:
                mp.setattr(canonical, "_canonicals", canonical._canonicals_py)
                mp.setattr(canonical, "_plain", canonical._plain_py)
            canons, seals = _event_canons(batch, first_seq)
            canons = canonical.canon_list(canons)
        types = ["user_message" if i % 3 else "model_turn" for i in range(len(batch))]
        assert canons == [_expected_canonical(first_seq + i, types[i], p) for i, p in enumerate(batch)]
        assert seals == []


@settings(max_examples=300, deadline=None)
@given(
    text=st.binary(max_size=200) | st.dictionaries(st.text(max_size=6), json_values, max_size=5).map(lambda p: orjson.dumps(p, option=orjson.OPT_SORT_KEYS)),
    needles=st.lists(st.binary(min_size=1, max_size=4), max_size=3),
)
def test_plain_answers_as_the_python_scans_do(text, needles):
    needles = tuple(needles)
    assert compiled.plain(text, needles) is canonical._plain_py(text, needles)
    joined = text + b"\x00" + text
    assert compiled.plain(joined, needles) is canonical._plain_py(joined, needles)


@pytest.mark.parametrize(
    "text",
    [b'{"x":1.0}', b'{"x":[1.0]}', b'{"x":{"y":2.0}}', b'{"x":1e+16}', b'{"x":1e-7}', b'{"x":-2.5e-10}', b"1e+16", '{"\U0001f600":1}'.encode(), b'{"x":1.0', b"1.0"],
)
def test_plain_refuses_every_mark_of_a_text_orjson_writes_otherwise(text):
    assert compiled.plain(text, ()) is False
    assert canonical._plain_py(text, ()) is False


@pytest.mark.parametrize("mark", [b"1.0}", b"1e-7", b"1e+9", "\U0001f600".encode(), b"2.0]", b"x.0", b"one-time", b"3.05"])
def test_plain_finds_a_mark_at_every_offset_of_the_sixteen_byte_steps(mark):
    # The compiled scan looks at sixteen bytes at a time: a mark may start, end or straddle a step
    # anywhere, and the text may end right after it.
    for before in range(0, 40):
        for after in (b"", b"}", b"abcdefghijklmnopqrstu"):
            text = b"a" * before + mark + after
            assert compiled.plain(text, ()) is canonical._plain_py(text, ()), (before, after)


def test_plain_accepts_lookalikes_and_finds_needles():
    text = b'{"amount":0.0031,"iban":"DE-1","note":"one-time, re-run","tz":"+00:00","when":"2026-01-01"}'
    assert compiled.plain(text, ()) is True and canonical._plain_py(text, ()) is True
    # A digit before "e-" looks like an exponent even inside a string: the exact path, harmless.
    assert compiled.plain(b'{"id":"a1e-5"}', ()) is False and canonical._plain_py(b'{"id":"a1e-5"}', ()) is False
    assert compiled.plain(text, (b'"iban',)) is False
    assert compiled.plain(text, (b'"account', b'"secret')) is True


@settings(max_examples=200, deadline=None)
@given(prev=st.binary(min_size=32, max_size=32), digests=st.lists(st.binary(max_size=300), max_size=10))
def test_links_chain_as_the_definition_says(prev, digests):
    expected, head = [], prev
    for d in digests:
        head = hashlib.sha256(head + d).digest()
        expected.append(head)
    assert compiled.links(prev, digests) == expected
    assert canonical._links_py(prev, digests) == expected
    # Framed: each hash after a prefix (a binary array's length word), in one text.
    framed = b"".join(b"\x00\x00\x00\x20" + h for h in expected)
    assert compiled.links_framed(prev, digests, b"\x00\x00\x00\x20") == framed
    assert canonical._links_framed_py(prev, digests, b"\x00\x00\x00\x20") == framed
    assert compiled.links_framed(prev, digests, b"") == b"".join(expected)


def test_sealed_names_send_a_batch_to_the_exact_path_in_either_implementation(implementation):
    batch = [{"content": "hello"}, {"account": "4010", "content": "Reading ledger 4010"}]
    types = ["model_turn", "user_message"]
    canons, seals = canonical.event_canons(
        first_seq=5,
        types=types,
        tss=[TS, TS],
        vs=[2, 2],
        payloads=batch,
        stored=[orjson.dumps(p, option=orjson.OPT_SORT_KEYS) for p in batch],
        stored_sorted=True,
        sealing=(frozenset({"account"}), (b'"account',)),
    )
    assert canons[0] == _expected_canonical(5, "model_turn", batch[0])
    # The second names a sealed field: its bytes hold commitments, and its salts come back.
    assert [seq for seq, _ in seals] == [6] and set(seals[0][1]) == {"/account", "/content"}
    assert b"4010" not in canons[1] and b'"sealed":{"/account":"' in canons[1]


@settings(max_examples=200, deadline=None)
@given(prev=st.binary(min_size=32, max_size=32), batch=payloads, first_seq=st.integers(min_value=1, max_value=2**62), prefix=st.sampled_from([b"", b"\x00\x00\x00\x20"]))
def test_a_batch_linked_in_place_links_as_its_built_bytes_do(prev, batch, first_seq, prefix):
    # The batch's common case (runs.canonical.Framed): hashed where its parts lie, against the
    # same links over the canonical bytes built one by one.
    raws = [orjson.dumps(p, option=orjson.OPT_SORT_KEYS) for p in batch]
    tails = [b',"ts":"2026-11-30T12:00:00.123456Z","type":"model_turn","v":%d}' % (i % 3) for i in range(len(batch))]
    expected = canonical._links_framed_py(prev, canonical._canonicals_py(raws, first_seq, tails), prefix)
    assert compiled.links_parts(prev, raws, first_seq, tails, prefix) == expected
    assert canonical._links_parts_py(prev, raws, first_seq, tails, prefix) == expected
    framed = canonical.Framed(raws, first_seq, tails)
    assert canonical.chain_links_framed(prev, framed, prefix) == expected
    assert b"".join(canonical.chain_links(prev, framed)) == canonical._links_framed_py(prev, canonical.canon_list(framed), b"")


def test_wrong_arguments_are_refused_with_a_message():
    with pytest.raises(TypeError, match=r"raws\[1\] must be bytes"):
        compiled.canonicals([b"{}", "{}"], 1, [b"}", b"}"])
    with pytest.raises(ValueError, match="differ in length"):
        compiled.canonicals([b"{}"], 1, [])
    with pytest.raises(ValueError, match="32-byte"):
        compiled.links(b"short", [])
    with pytest.raises(TypeError, match=r"canons\[0\] must be bytes"):
        compiled.links(b"x" * 32, [None])
    with pytest.raises(ValueError, match="32-byte"):
        compiled.links_framed(b"short", [], b"")
    with pytest.raises(ValueError, match="differ in length"):
        compiled.links_parts(b"x" * 32, [b"{}"], 1, [], b"")
    with pytest.raises(TypeError, match=r"tails\[0\] must be bytes"):
        compiled.links_parts(b"x" * 32, [b"{}"], 1, ["}"], b"")
    with pytest.raises(TypeError, match=r"canons\[1\] must be bytes"):
        compiled.links_framed(b"x" * 32, [b"y" * 32, "z"], b"")


def test_a_batch_of_several_times_and_versions_frames_each_event_by_its_own(implementation):
    # An import's chunk: every event its own time, versions mixed; an append's batch shares one.
    later = TS.replace(second=7, microsecond=5)
    batch = [{"content": "a"}, {"content": "b"}, {"content": "c"}]
    tss, vs, types = [TS, later, later], [2, 2, 3], ["model_turn", "model_turn", "model_turn"]
    canons, _ = canonical.event_canons(
        first_seq=3,
        types=types,
        tss=tss,
        vs=vs,
        payloads=batch,
        stored=[orjson.dumps(p, option=orjson.OPT_SORT_KEYS) for p in batch],
        stored_sorted=True,
        sealing=(frozenset(), ()),
    )
    texts = ["2026-11-30T12:00:00.123456Z", "2026-11-30T12:00:07.000005Z", "2026-11-30T12:00:07.000005Z"]
    expected = [b'{"payload":' + rfc8785.dumps(p) + b',"seq":%d,"ts":"%s","type":"model_turn","v":%d}' % (3 + i, texts[i].encode(), vs[i]) for i, p in enumerate(batch)]
    assert canonical.canon_list(canons) == expected


@settings(max_examples=300, deadline=None)
@given(
    payload=st.dictionaries(st.text(max_size=6), json_values, max_size=5),
    seq=st.integers(min_value=1, max_value=2**62),
    ts=st.datetimes(min_value=datetime(1000, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59, 999999), timezones=st.just(timezone.utc)),
)
def test_one_event_frames_as_the_definition_says(payload, seq, ts):
    # The single append's compiled path (canonical_one) and the Python path it replaces, against an
    # independent RFC 8785 encoder: a payload with a mark that orjson writes otherwise falls back.
    stored = orjson.dumps(payload, option=orjson.OPT_SORT_KEYS)
    text = ts.strftime("%Y-%m-%dT%H:%M:%S.%f") + "Z"
    expected = b'{"payload":' + rfc8785.dumps(payload) + b',"seq":%d,"ts":"%s","type":"tool_call_started","v":3}' % (seq, text.encode())
    for use_python in (False, True):
        with pytest.MonkeyPatch.context() as mp:
            if use_python:
                mp.setattr(canonical, "_canonical_one", None)
            canon, salts = canonical.event_canon(seq=seq, type="tool_call_started", ts=ts, v=3, payload=payload, stored=stored, sealing=(frozenset(), ()), stored_sorted=True)
        assert (canon, salts) == (expected, None)
    assert compiled.canonical_one(stored, seq, ts, b',"type":"tool_call_started","v":3}', ()) in (expected, None)


def test_one_event_with_a_sealed_name_or_a_mark_is_left_to_the_exact_path():
    type_tail = b',"type":"user_message","v":2}'
    assert compiled.canonical_one(b'{"account":"4010"}', 1, TS, type_tail, (b'"account',)) is None
    assert compiled.canonical_one(b'{"x":1.0}', 1, TS, type_tail, ()) is None
    assert compiled.canonical_one(b'{"x":1}', 1, TS, type_tail, ()) == b'{"payload":{"x":1},"seq":1,"ts":"2026-11-30T12:00:00.123456Z"' + type_tail
    with pytest.raises(TypeError, match="ts must be a datetime"):
        compiled.canonical_one(b"{}", 1, "2026-11-30", type_tail, ())
    with pytest.raises(TypeError, match=r"needles\[0\] must be bytes"):
        compiled.canonical_one(b"{}", 1, TS, type_tail, ("account",))
