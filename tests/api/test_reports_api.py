"""GET /api/reports/{table} against the known history (tests/reports/history.py): the JSON holds
the same hand-counted figures as the screen and the CSV; scopes, tenants and bad input."""

from __future__ import annotations

from datetime import datetime

import pytest
from django.test import Client

from access.roles import roles_ensure
from access.tokens import token_create
from tests.api.helpers import Api
from tests.reports.history import EXPECTED, history_build

pytestmark = pytest.mark.django_db
PERIOD = {"since": "2026-11-02", "until": "2026-11-29"}


@pytest.fixture
def history(db):
    roles_ensure()
    history_build()


@pytest.fixture
def bi(db):
    _, secret = token_create(name="bi tool", scopes=["reports"])
    return Api(Client(), secret)


def test_every_table_is_the_hand_count(history, bi):
    for name in ("volume", "outcomes", "times-by-risk", "times-by-tool", "deadlines", "sla"):
        resp = bi.get(f"/api/reports/{name}", **PERIOD)
        assert resp.status_code == 200, resp.content
        doc = resp.json()
        assert doc["rows"] == EXPECTED[name], name
        assert (doc["start"], doc["end"], doc["as_of"]) == ("2026-11-02T00:00:00Z", "2026-11-30T00:00:00Z", "2026-11-30T00:00:00Z")
        assert doc["columns"] == list(EXPECTED[name][0])
    worst = bi.get("/api/reports/worst", **PERIOD).json()["rows"]
    assert [(r["call_id"], r["status"], r["past_deadline_s"]) for r in worst] == EXPECTED["worst"]
    sla = bi.get("/api/reports/sla-trend", **PERIOD).json()["rows"]
    assert {i: (r["met"], r["breached"], r["pending"]) for i, r in enumerate(sla) if r["met"] + r["breached"] + r["pending"]} == EXPECTED["sla-trend"]
    trend = bi.get("/api/reports/trend", **PERIOD).json()["rows"]
    assert [(datetime.fromisoformat(r["start"]), r["opened"], r["resolved"], r["overdue_at_end"]) for r in trend] == EXPECTED["trend"]


def test_the_people_table_is_for_managers_signed_in(history, bi):
    from tests.console.helpers import _user

    assert bi.get("/api/reports/people", **PERIOD).status_code == 403
    manager = Client()
    manager.force_login(_user("mandy.manager", "manager"))
    resp = Api(manager).get("/api/reports/people", **PERIOD)
    assert resp.status_code == 200 and resp.json()["rows"] == EXPECTED["people"]
    oncall = Client()
    oncall.force_login(_user("olivia.oncall", "oncall"))
    assert Api(oncall).get("/api/reports/volume").status_code == 403  # no view_reports


def test_a_token_needs_the_reports_scope(history, reader, outsider):
    resp = reader.get("/api/reports/volume")
    assert resp.status_code == 403 and "no 'reports' scope" in resp.json()["detail"]
    assert outsider.get("/api/reports/volume").status_code == 401


def test_a_token_limited_to_a_tenant_counts_its_runs_only(history):
    _, secret = token_create(name="acme bi", scopes=["reports"], tenants=["acme"])
    rows = {r["tool"]: r for r in Api(Client(), secret).get("/api/reports/volume", **PERIOD).json()["rows"]}
    # acme's uncertain calls: p1 p2 p5 p6, r3 r4, l1; every live start is acme's.
    assert rows["pay"] == {"tool": "pay", "uncertain": 4, "recorded": 7, "per_thousand": 571.4}
    assert rows["refund"] == {"tool": "refund", "uncertain": 2, "recorded": 6, "per_thousand": 333.3}
    assert rows["lookup"] == {"tool": "lookup", "uncertain": 1, "recorded": 19, "per_thousand": 52.6}


@pytest.mark.parametrize(
    "params, status, words",
    [
        ({"days": "14"}, 422, "days"),
        ({"since": "2026-11-02"}, 422, "give both since and until"),
        ({"since": "2026-11-09", "until": "2026-11-02"}, 422, "is before the first"),
        ({"risk_class": "scary"}, 422, "risk_class"),
        ({"team": "nobody"}, 422, "team 'nobody' does not exist"),
        ({"tool": "bad\x01name"}, 422, "tool must be 1 to 200 characters"),
    ],
)
def test_bad_input_is_named(history, bi, params, status, words):
    resp = bi.get("/api/reports/volume", **params)
    assert resp.status_code == status and words in resp.content.decode(), resp.content
    assert bi.get("/api/reports/nothing").status_code in (404, 422)
