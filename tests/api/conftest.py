"""Actors of the API tests: an agent token, a reader, an on-call decider, tenant-limited tokens,
and an outsider with no credentials at all."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from access.tokens import token_create


class Api:
    """A tiny JSON client over Django's test client, with a token or a session."""

    def __init__(self, client: Client, secret: str | None = None):
        self.client = client
        self.headers = {"HTTP_AUTHORIZATION": f"Bearer {secret}"} if secret else {}

    def get(self, path, **params):
        return self.client.get(path, params, **self.headers)

    def post(self, path, body=None, **headers):
        return self.client.post(path, json.dumps(body if body is not None else {}), content_type="application/json", **self.headers, **headers)


@pytest.fixture
def agent(db):
    _, secret = token_create(name="billing agent", scopes=["append", "read"])
    return Api(Client(), secret)


@pytest.fixture
def reader(db):
    _, secret = token_create(name="dashboard", scopes=["read"])
    return Api(Client(), secret)


@pytest.fixture
def decider(db):
    _, secret = token_create(name="ops script", scopes=["read", "decide"])
    return Api(Client(), secret)


@pytest.fixture
def tenant_a(db):
    _, secret = token_create(name="acme agent", scopes=["append", "read", "decide"], tenants=["acme"])
    return Api(Client(), secret)


@pytest.fixture
def tenant_b(db):
    _, secret = token_create(name="globex agent", scopes=["append", "read", "decide"], tenants=["globex"])
    return Api(Client(), secret)


@pytest.fixture
def outsider(db):
    return Api(Client())
