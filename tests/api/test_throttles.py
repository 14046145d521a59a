"""The API's rate limits through the real request path: an address that keeps presenting wrong
tokens, and a token sending more than its rate, are answered 429 with Retry-After.

Each test comes from an address of its own and uses fresh tokens, so counts left in a shared Redis
cache by another test (or an earlier run) never reach it."""

from __future__ import annotations


import pytest
from django.test import Client

from access.tokens import token_create
from tests.api.helpers import _address, _fresh_window


def test_an_address_guessing_tokens_gets_429_with_retry_after_and_then_even_a_good_token_waits(db, settings):
    settings.RECKON_API_AUTH_FAILURES, settings.RECKON_API_AUTH_WINDOW_S = 5, 120
    _fresh_window(120)
    _, good = token_create(name="agent", scopes=["read"])
    client, addr = Client(), _address()
    codes = [client.get("/api/runs", HTTP_AUTHORIZATION=f"Bearer rk_guess{i}", REMOTE_ADDR=addr).status_code for i in range(8)]
    assert codes == [401] * 5 + [429] * 3
    refused = client.get("/api/runs", HTTP_AUTHORIZATION=f"Bearer {good}", REMOTE_ADDR=addr)
    assert refused.status_code == 429
    assert 1 <= int(refused["Retry-After"]) <= 120
    body = refused.json()
    assert body["code"] == "throttled" and "failed token attempts from this address" in body["detail"] and body["retry_after"] == int(refused["Retry-After"])
    # Another address is not affected, and the good token works from there.
    assert client.get("/api/runs", HTTP_AUTHORIZATION=f"Bearer {good}", REMOTE_ADDR=_address()).status_code == 200


def test_behind_a_proxy_the_forwarded_client_is_counted_not_the_proxy(db, settings):
    settings.RECKON_API_AUTH_FAILURES, settings.RECKON_PROXY_COUNT = 2, 1
    _fresh_window(settings.RECKON_API_AUTH_WINDOW_S)
    proxy, guesser, other = _address(), _address(), _address()
    client = Client()
    for _ in range(3):
        client.get("/api/runs", HTTP_AUTHORIZATION="Bearer rk_nope", REMOTE_ADDR=proxy, HTTP_X_FORWARDED_FOR=guesser)
    _, good = token_create(name="agent", scopes=["read"])
    assert client.get("/api/runs", HTTP_AUTHORIZATION=f"Bearer {good}", REMOTE_ADDR=proxy, HTTP_X_FORWARDED_FOR=guesser).status_code == 429
    assert client.get("/api/runs", HTTP_AUTHORIZATION=f"Bearer {good}", REMOTE_ADDR=proxy, HTTP_X_FORWARDED_FOR=other).status_code == 200


@pytest.mark.parametrize("limit", [3])
def test_a_token_over_its_rate_gets_429_with_retry_after(db, settings, limit):
    settings.RECKON_API_TOKEN_RATE, settings.RECKON_API_TOKEN_WINDOW_S = limit, 60
    _fresh_window(60)
    _, busy = token_create(name="busy agent", scopes=["read"])
    _, calm = token_create(name="calm agent", scopes=["read"])
    client = Client()
    codes = [client.get("/api/runs", HTTP_AUTHORIZATION=f"Bearer {busy}").status_code for _ in range(limit + 2)]
    assert codes == [200] * limit + [429] * 2
    over = client.get("/api/runs", HTTP_AUTHORIZATION=f"Bearer {busy}")
    assert over.status_code == 429 and 1 <= int(over["Retry-After"]) <= 60 and over.json()["code"] == "throttled"
    # The limit is per token: another token from the same address is served.
    assert client.get("/api/runs", HTTP_AUTHORIZATION=f"Bearer {calm}").status_code == 200


def test_a_token_request_costs_two_redis_round_trips_not_four(db, settings, monkeypatch):
    """Every token request checks its address's failures and counts the token: on Redis that is
    one GET and one pipelined SET NX + INCR, so the limits cost two round trips per request (the
    cache API's add and incr alone were three: SET NX, EXISTS, INCR). Counted at the socket: every
    command or pipeline redis-py sends is one send_packed_command."""
    if not settings.REDIS_URL:
        pytest.skip("needs Redis: run with REDIS_URL=redis://...")
    from redis.connection import AbstractConnection

    sent: list = []
    real = AbstractConnection.send_packed_command

    def counting(self, command, check_health=True):
        sent.append(command)
        return real(self, command, check_health)

    monkeypatch.setattr(AbstractConnection, "send_packed_command", counting)
    _fresh_window(settings.RECKON_API_TOKEN_WINDOW_S)
    _, secret = token_create(name="agent", scopes=["read"])
    client, addr = Client(), _address()
    assert client.get("/api/runs", HTTP_AUTHORIZATION=f"Bearer {secret}", REMOTE_ADDR=addr).status_code == 200  # connections opened
    sent.clear()
    assert client.get("/api/runs", HTTP_AUTHORIZATION=f"Bearer {secret}", REMOTE_ADDR=addr).status_code == 200
    assert len(sent) == 2, sent
