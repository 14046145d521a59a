"""A request body is used exactly as sent or refused naming the field: duplicate keys, integers
beyond 64 bits, NUL characters and lone surrogates never reach the store reinterpreted."""

import pytest

from runs.models import Event
from tests.api.helpers import _start

pytestmark = pytest.mark.django_db


def _raw(api, path, body: str):
    return api.client.post(path, body.encode("utf-8", "surrogatepass"), content_type="application/json", **api.headers)


def _refused(r, field: str):
    assert r.status_code == 400, r.content
    doc = r.json()
    assert doc["code"] == "invalid_body" and field in doc["detail"], doc
    return doc["detail"]


EVENT = '{"type": "user_message", "payload": {"content": "x", "n": %s}}'


@pytest.mark.parametrize(
    "body, field, why",
    [
        ('{"epoch": 1, "expected_seq": 99, "expected_seq": 1, "events": [%s]}' % (EVENT % 1), "body.expected_seq", "appears twice"),
        ('{"epoch": 1, "expected_seq": 1, "events": [{"type": "user_message", "payload": {"content": "x", "content": "y"}}]}', "body.events[0].payload.content", "appears twice"),
        ('{"epoch": 1, "expected_seq": 1, "events": [{"type": "user_message", "payload": {"content": "sig:{\\"a\\":1}", "k": 1, "k": 2}}]}', "body.events[0].payload.k", "appears twice"),
        ('{"epoch": 1, "expected_seq": 1, "events": [{"type": "user_message", "payload": {"content": "x", "a\\\\": 1, "k": 1, "k": 2}}]}', "body.events[0].payload.k", "appears twice"),
        ('{"epoch": 1, "expected_seq": 1, "events": [{"type": "user_message", "payload": {"content": "x", "a" : 1, "k": 1, "k": 2}}]}', "body.events[0].payload.k", "appears twice"),
        ('{"epoch": 1, "expected_seq": 1, "events": [%s]}' % (EVENT % "18446744073709551617"), "body.events[0].payload.n", "outside the signed 64-bit range"),
        ('{"epoch": 1, "expected_seq": 1, "events": [%s]}' % (EVENT % "9223372036854775808"), "body.events[0].payload.n", "outside the signed 64-bit range"),
        ('{"epoch": 1, "expected_seq": 1, "events": [%s]}' % (EVENT % '"a\\u0000b"'), "body.events[0].payload.n", "NUL"),
        ('{"epoch": 1, "expected_seq": 1, "events": [%s]}' % (EVENT % '"\\ud800"'), "body.events[0].payload.n", "lone UTF-16 surrogate"),
    ],
)
def test_a_body_that_cannot_be_kept_as_sent_is_refused_naming_the_field(agent, body, field, why):
    _start(agent)
    assert why in _refused(_raw(agent, "/api/runs/run-api-1/events", body), field)
    assert Event.objects.filter(run_id="run-api-1").count() == 1


def test_the_largest_64_bit_integers_and_escaped_text_that_only_looks_like_a_nul_are_kept_exactly(agent):
    _start(agent)
    body = '{"epoch": 1, "expected_seq": 1, "events": [{"type": "user_message", "payload": {"content": "\\\\u0000 \\"k\\": 1", "big": 9223372036854775807, "small": -9223372036854775808}}]}'
    r = _raw(agent, "/api/runs/run-api-1/events", body)
    assert r.status_code == 201, r.content
    payload = Event.objects.get(run_id="run-api-1", seq=2).payload
    assert payload["big"] == 2**63 - 1 and payload["small"] == -(2**63) and payload["content"] == '\\u0000 "k": 1'


def test_a_body_that_is_not_json_is_a_400_saying_where(agent):
    _start(agent)
    detail = _refused(_raw(agent, "/api/runs/run-api-1/events", '{"epoch": 1,'), "not JSON")
    assert "line 1 column" in detail


@pytest.mark.parametrize("value", ["..", "run'x", "run x", ".hidden"])
def test_the_api_refuses_an_invalid_run_id_with_422_stating_the_rule(agent, value):
    from urllib.parse import quote

    r = agent.post(f"/api/runs/{quote(value)}/lease", {"holder": "agent-1"})
    assert r.status_code == 422 and "ASCII letters, digits" in r.json()["detail"], r.content
