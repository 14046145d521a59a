"""Schemathesis against the live OpenAPI document, through the WSGI application.

Every operation is called with generated input (with a token holding every scope, and once
without credentials): no response is a 5xx, every response has a status the operation documents,
and its body matches the schema documented for that status. The schema is loaded at module level
from the WSGI app (``from_fixture`` does not work on pytest 9).
"""

from __future__ import annotations

import hashlib

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import content_type_conformance, response_headers_conformance, response_schema_conformance, status_code_conformance

from reckon.wsgi import application

schema = schemathesis.openapi.from_wsgi("/api/openapi.json", application)

SECRET = "rk_schemathesis-fixed-secret-for-the-test-database-only"
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance, response_headers_conformance]
EXAMPLES = 25


@pytest.fixture(autouse=True, scope="module")
def _keep_the_test_connection():
    # Django's WSGI handler closes the database connection at the end of each request; inside a
    # test's transaction that would close it under the test. Django's own test client disconnects
    # these handlers too.
    from django.core.signals import request_finished, request_started
    from django.db import close_old_connections

    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


def _seed() -> None:
    """A token with every scope, a run with events, and an uncertain call, so some calls find data."""
    from access.models import ApiToken
    from tests.api.test_recovery_api import _uncertain_call

    ApiToken.objects.get_or_create(
        secret_sha256=hashlib.sha256(SECRET.encode()).hexdigest(),
        defaults={"name": "schemathesis", "prefix": SECRET[:10], "scopes": ["append", "read", "decide"]},
    )
    if not ApiToken.objects.filter(name="seeded-run").exists():
        ApiToken.objects.create(name="seeded-run", prefix="x", secret_sha256="0" * 64, scopes=["read"])
        _uncertain_call("run-schema", "acme")


@pytest.mark.django_db
@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_every_operation_answers_within_its_documented_schema(case):
    _seed()
    case.call_and_validate(headers={"Authorization": f"Bearer {SECRET}"}, checks=CHECKS)


@pytest.mark.django_db
def test_without_credentials_every_operation_answers_401():
    import json

    from django.test import Client

    client = Client()
    doc = json.loads(client.get("/api/openapi.json").content)
    for path, ops in doc["paths"].items():
        url = path.replace("{run_id}", "run-x").replace("{pk}", "1").replace("{tool}", "post_correction")
        for method in ops:
            r = client.get(url) if method == "get" else getattr(client, method)(url, "{}", content_type="application/json")
            assert r.status_code == 401, f"{method.upper()} {path}: {r.status_code}"
            assert r.json()["code"] == "unauthenticated"


def test_every_operation_declares_every_error_status():
    import json

    from django.test import Client

    doc = json.loads(Client().get("/api/openapi.json").content)
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            declared = set(op["responses"])
            assert {"401", "403", "404", "409", "422"} <= declared, f"{method.upper()} {path} declares only {sorted(declared)}"
