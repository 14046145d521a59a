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


@pytest.fixture(autouse=True)
def _keep_the_test_connection():
    # Django's WSGI handler closes the database connection at the end of each request; inside a
    # test's transaction that would close it under the test. Django's own test client disconnects
    # these handlers too. Per test, not per module: scoped to the module, this module run alone on
    # two workers (xdist's work stealing among the Schemathesis items, which share one node id)
    # failed 4 of its 20 tests every time with "Cannot operate on a closed database".
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
    from tests.recovery.helpers import _uncertain_call

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


def test_the_document_states_the_run_id_pattern_the_names_the_cursors_and_the_nul_refusal():
    """The rules the views check outside pydantic are in the document, from their one definition
    (api/openapi_rules.py): schemathesis found valid-looking requests refused (ST202) without them."""
    import json
    import re

    from django.test import Client

    from api.schemas import NAME_PATTERN
    from runs.run_ids import RUN_ID_PATTERN, run_id_problem

    doc = json.loads(Client().get("/api/openapi.json").content)

    def param(path, method, name):
        return next(p for p in doc["paths"][path][method]["parameters"] if p["name"] == name)

    run_id_paths = [(path, m) for path, ops in doc["paths"].items() if "{run_id}" in path for m in ops]
    assert len(run_id_paths) >= 7
    for path, method in run_id_paths:
        schema = param(path, method, "run_id")["schema"]
        assert schema["pattern"] == RUN_ID_PATTERN and schema["maxLength"] == 200, (path, schema)
    # The pattern is the rule: what it matches the check accepts, and the reverse.
    for value in ["a", "run-1.x:y_z", "A" * 200, "-a", ".hidden", "a/b", "a" * 201, "é", "a\x00"]:
        assert (re.search(RUN_ID_PATTERN, value) is not None) == (run_id_problem(value) is None), value
    assert param("/api/policies/{tool}", "get", "tool")["schema"]["pattern"] == NAME_PATTERN
    assert doc["components"]["schemas"]["LeaseAcquireIn"]["properties"]["holder"]["pattern"] == NAME_PATTERN
    for path, name in [("/api/runs", "cursor"), ("/api/uncertain-calls", "after")]:
        p = param(path, "get", name)
        assert "previous page returned" in p["description"] and p["schema"]["anyOf"][0]["pattern"] == "^[A-Za-z0-9_-]*$", p
    # No NUL in any other string, nor in a key of a free-form object.
    assert param("/api/runs", "get", "run_id_prefix")["schema"]["anyOf"][0]["pattern"] == r"^[^\x00]*$"
    event = doc["components"]["schemas"]["EventIn"]["properties"]
    assert event["type"]["pattern"] == r"^[^\x00]*$" and event["payload"]["propertyNames"] == {"pattern": r"^[^\x00]*$"} and event["payload"]["additionalProperties"] == {"$ref": "#/components/schemas/JsonValue"}


def test_a_405_names_the_methods_of_the_path_in_allow():
    from django.test import Client

    client = Client()
    for method, path, allowed in [("TRACE", "/api/runs", "GET"), ("PUT", "/api/runs/run-x/lease", "POST"), ("DELETE", "/api/policies/post_correction", "GET, PATCH")]:
        r = client.generic(method, path)
        assert r.status_code == 405 and r.json()["code"] == "method_not_allowed", (method, path)
        assert set(r.get("Allow", "").split(", ")) == set(allowed.split(", ")), (method, path, r.get("Allow"))
