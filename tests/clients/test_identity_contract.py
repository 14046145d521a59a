"""The identity formula is written once, in the agent client (``reckon_client.identity``), and the
server imports it: an agent and the server must compute the same key for the same call, or a
resumed agent would not recognise its own completed calls.

Checked on every recorded fixture log (each start's recorded key and signature, and the key the
server's fold derives for a start that recorded none) and, on generated runs, secrets, arguments
and operation ids, against the text json.dumps defines: what the client computes in an environment
without orjson, where the signature's faster encoder is not installed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import reckon_client.identity as client
from hypothesis import given, settings
from hypothesis import strategies as st

from runs.calls import start_key

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "events"
LOGS = sorted(p for p in FIXTURES.glob("v*/*.jsonl"))


def _starts(path: Path):
    run_id, secret = path.stem, None
    for line in path.read_text().splitlines():
        ev = json.loads(line)
        if ev["type"] == "run_started":
            run_id, secret = ev["payload"].get("run_id", run_id), ev["payload"].get("key_secret")
        elif ev["type"] == "tool_call_started":
            yield run_id, secret, ev["payload"]


def test_there_are_recorded_starts_to_check_in_every_schema_version():
    versions = {p.parent.name for p in LOGS if any(True for _ in _starts(p))}
    assert {"v1", "v2", "v3", "v4"} <= versions


@pytest.mark.parametrize("path", LOGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_client_computes_each_recorded_start_key_as_the_server_does(path):
    for run_id, secret, p in _starts(path):
        sig = client.signature(p["name"], p["arguments"])
        if "signature" in p:
            assert sig == p["signature"], f"{path.name}: {p['call_id']}"
        op = p.get("operation_id")
        if op == p.get("idempotency_key"):
            op = None  # filled in by the store from the key: the writer named no operation
        mine = client.idempotency_key(run_id, sig, secret, op if secret else None)
        assert mine == start_key(run_id, p, sig, secret=secret), f"{path.name}: {p['call_id']}"
        if p.get("idempotency_key"):
            assert mine == p["idempotency_key"], f"{path.name}: {p['call_id']} recorded another key"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8) | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)


def _defined_key(run_id, name, arguments, secret, operation_id):
    sig = name + ":" + json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return client.idempotency_key(run_id, sig, secret, operation_id)


@settings(max_examples=300, deadline=None)
@given(
    run_id=st.text(min_size=1, max_size=20),
    name=st.text(min_size=1, max_size=12),
    arguments=json_values,
    secret=st.none() | st.text(alphabet="0123456789abcdef", min_size=32, max_size=64),
    operation_id=st.none() | st.text(max_size=12),
)
def test_the_server_and_a_client_without_orjson_compute_the_same_key_for_any_call(run_id, name, arguments, secret, operation_id):
    assert client.call_key(run_id, name, arguments, secret, operation_id) == _defined_key(run_id, name, arguments, secret, operation_id)


@settings(max_examples=200, deadline=None)
@given(operation_id=st.none() | st.text(max_size=12), seq=st.integers(min_value=1, max_value=10**12))
def test_a_stale_read_done_again_names_the_operation_docs_schema_versions_states(operation_id, seq):
    expected = f"refresh@{seq}" if operation_id is None else f"{operation_id}|refresh@{seq}"
    assert client.refresh_operation_id(operation_id, seq) == expected
