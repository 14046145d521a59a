"""Named actors for the console's tests: Colin in compliance, Mandy the manager, Otto the outsider
(signed in, in no group), and all of them with an anonymous visitor. Olivia on call and Ada the
administrator, whom other packages' tests need too, are in tests/conftest.py with the demo's conflict."""

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
