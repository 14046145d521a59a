"""Named actors for the console's tests: Colin in compliance, Mandy the manager, Otto the outsider
(signed in, in no group), and all of them with an anonymous visitor. Olivia on call and Ada the
administrator, whom other packages' tests need too, are in tests/conftest.py with the demo's conflict.
And the console as deployed (gunicorn with the production settings) for the browser tests of it."""

from __future__ import annotations

import pytest

from tests.console.helpers import _user


@pytest.fixture
def compliance(roles):
    return _user("colin.compliance", "compliance")


@pytest.fixture
def manager(roles):
    return _user("mandy.manager", "manager")


@pytest.fixture
def outsider(roles):
    return _user("otto.outsider")


@pytest.fixture
def actors(oncall, compliance, manager, outsider, admin_user):
    return {"oncall": oncall, "compliance": compliance, "manager": manager, "outsider": outsider, "admin": admin_user, "anonymous": None}


@pytest.fixture
def flying(demo_policies):
    """A call in flight: its agent holds the run's lease and has not completed it."""
    from runs.leases import lease_acquire
    from runs.store import NewEvent, events_append

    lease = lease_acquire(run_id="run-flying", holder="agent-7")
    events_append(
        run_id="run-flying",
        epoch=lease.epoch,
        expected_seq=0,
        events=[
            NewEvent("run_started", {"run_id": "run-flying"}),
            NewEvent("tool_call_started", {"call_id": "call-fly-1", "name": "issue_refund", "arguments": {"tenant": "acme", "order": "ORD-5521"}, "idempotency_key": "fly0key0001", "signature": "s"}),
        ],
    )
    return "run-flying"


@pytest.fixture
def decided(conflict_call, oncall):
    from recovery.decisions import decision_record

    decision_record(pk=conflict_call.pk, decision="happened", by=oncall, reason="seen in the ledger", seen_version=conflict_call.version, evidence_ref="LEDGER-TKT-9001")
    return conflict_call


@pytest.fixture(scope="session")
def _production_server(django_db_setup, django_db_blocker):
    """gunicorn with DEBUG off and the production settings, against this process's test database:
    started once per test process and shared by the tests of the console as deployed (its start and
    stop were two seconds of each of them). What it keeps between them is the data's (emptied after
    each test, as for the live server) and the per-process caches of values that no test's data
    changes (statements, patterns, the time zones); each test's browser context is its own."""
    from tests.api.live import Server, free_port
    from tests.production import PROXY_HEADERS, production_env

    port = free_port()
    # The browser reaches gunicorn over plain HTTP while the proxy header says HTTPS, so its Origin
    # (http://127.0.0.1:port) is named as trusted, as a deployer names the proxy's public origin.
    with django_db_blocker.unblock():
        server = Server(workers=1, threads=4, port=port, env=production_env(CSRF_TRUSTED_ORIGINS=f"http://127.0.0.1:{port}"), ready=PROXY_HEADERS)
    yield server
    server.stop()


@pytest.fixture
def prod_server(transactional_db, _production_server):
    """The deployed console, for a test whose data it must see (committed, emptied afterwards)."""
    return _production_server
