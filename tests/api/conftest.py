"""Actors of the API tests: an agent token, an on-call decider, tenant-limited tokens, and an
outsider with no credentials at all (the read-only ``reader``, which other packages' tests use
too, is in tests/conftest.py); and a run whose log quotes a sensitive value everywhere."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from access.tokens import token_create
from recovery.detection import uncertain_calls_detect
from recovery.models import ToolPolicy
from reckon_client.identity import call_key, signature
from runs.leases import lease_acquire, lease_release
from runs.store import NewEvent, events_append
from tests.api.helpers import ARGS, SECRET, Api


@pytest.fixture
def agent(db):
    _, secret = token_create(name="billing agent", scopes=["append", "read"])
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


@pytest.fixture
def leaky_run(db):
    """A run whose log quotes the sensitive account in every form the store holds: arguments,
    signatures of a start and a completion, a JSON result, and an attempt whose error and raw
    evidence quote the receiver's JSON; its second call is left uncertain."""
    ToolPolicy.objects.create(tool="post_correction", risk_class="irreversible", strategy="escalate", sensitive_fields=["account"])
    run_id = "run-mask"
    sig = signature("post_correction", ARGS)
    key = call_key(run_id, "post_correction", ARGS)
    other = {**ARGS, "amount": 480}
    other_key = call_key(run_id, "post_correction", other)
    lease = lease_acquire(run_id=run_id, holder="agent")
    events_append(
        run_id=run_id,
        epoch=lease.epoch,
        expected_seq=0,
        events=[
            NewEvent("run_started", {"run_id": run_id}),
            NewEvent("tool_call_started", {"call_id": "c1", "name": "post_correction", "arguments": ARGS, "signature": sig, "idempotency_key": key}),
            NewEvent(
                "tool_call_completed",
                {"call_id": "c1", "name": "post_correction", "content": json.dumps({"account": SECRET, "status": "posted"}), "is_error": False, "signature": sig, "idempotency_key": key},
            ),
            NewEvent("tool_call_started", {"call_id": "c2", "name": "post_correction", "arguments": other, "signature": signature("post_correction", other), "idempotency_key": other_key}),
        ],
    )
    lease_release(run_id=run_id, epoch=lease.epoch)
    uncertain_calls_detect(run_id=run_id)
    lease = lease_acquire(run_id=run_id, holder="reconciler")
    events_append(
        run_id=run_id,
        epoch=lease.epoch,
        expected_seq=5,
        events=[
            NewEvent(
                "reconciliation_attempted",
                {
                    "call_id": "c2",
                    "idempotency_key": other_key,
                    "start_seq": 4,
                    "attempt": 1,
                    "outcome": "unavailable",
                    "evidence": {"raw": json.dumps({"account": SECRET, "error": "busy"}), "observed": {"account": SECRET}},
                    "error": "ledger answered " + json.dumps({"account": SECRET}),
                    "rule": "unavailable: look again later",
                    "next_attempt_in_s": 10,
                },
            )
        ],
    )
    lease_release(run_id=run_id, epoch=lease.epoch)
    return run_id
