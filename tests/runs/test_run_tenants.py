"""The run-tenant model (``runs.tenants``) kept by every kind of append: one event, a batch (its
rows riding in the append's statement on PostgreSQL, generated from the rule's rows), a batch that
ends the run, and a batch the fence refuses, which records nothing."""

from __future__ import annotations

import pytest
from django.db import connection

from runs import rules
from runs.errors import SeqConflict
from runs.leases import lease_acquire
from runs.models import RunTenant
from runs.store import NewEvent, events_append
from runs.tenants import run_tenants

pytestmark = pytest.mark.django_db


def _start(call: str, tenant: str) -> NewEvent:
    return NewEvent("tool_call_started", {"call_id": call, "name": "post_note", "arguments": {"tenant": tenant, "n": 1}})


def _rows(run_id: str) -> set[str]:
    return set(RunTenant.objects.filter(run_id=run_id).values_list("tenant", flat=True))


@pytest.fixture
def python_inserts(monkeypatch):
    """How often the rule's rows went in through Python (``rows_insert``) rather than the statement."""
    calls = []
    real = rules.rows_insert

    def counted(model, rows):
        calls.append(rows)
        return real(model, rows)

    monkeypatch.setattr(rules, "rows_insert", counted)
    monkeypatch.setattr("runs.tenants.rows_insert", counted)
    return calls


def test_a_batch_records_each_tenant_its_starts_name_once(python_inserts):
    lease = lease_acquire(run_id="rt-batch", holder="w", ttl_seconds=60)
    events_append(run_id="rt-batch", epoch=lease.epoch, expected_seq=0, events=[NewEvent("run_started", {"run_id": "rt-batch"})])
    batch = [_start("c1", "acme"), NewEvent("model_turn", {"text": "next"}), _start("c2", "globex"), _start("c3", "acme")]
    events_append(run_id="rt-batch", epoch=lease.epoch, expected_seq=1, events=batch)
    assert _rows("rt-batch") == {"acme", "globex"} and run_tenants(run_id="rt-batch") == {"acme", "globex"}
    events_append(run_id="rt-batch", epoch=lease.epoch, expected_seq=5, events=[_start("c4", "globex"), _start("c5", "initech")])
    assert RunTenant.objects.filter(run_id="rt-batch").count() == 3 and _rows("rt-batch") == {"acme", "globex", "initech"}
    if connection.vendor == "postgresql":
        assert [c for c in python_inserts if c] == []  # the rows rode in each batch's statement
    else:
        assert [c for c in python_inserts if c] == [[("rt-batch", "acme"), ("rt-batch", "globex")], [("rt-batch", "globex"), ("rt-batch", "initech")]]


def test_a_batch_the_fence_refuses_records_no_tenant():
    lease = lease_acquire(run_id="rt-refused", holder="w", ttl_seconds=60)
    events_append(run_id="rt-refused", epoch=lease.epoch, expected_seq=0, events=[NewEvent("run_started", {"run_id": "rt-refused"})])
    with pytest.raises(SeqConflict):
        events_append(run_id="rt-refused", epoch=lease.epoch, expected_seq=7, events=[_start("c1", "acme"), _start("c2", "globex")])
    assert _rows("rt-refused") == set()


def test_a_batch_that_ends_the_run_records_its_tenants_too():
    lease = lease_acquire(run_id="rt-end", holder="w", ttl_seconds=60)
    events = [NewEvent("run_started", {"run_id": "rt-end", "tenant": "acme"}), _start("c1", "globex"), NewEvent("run_finished", {"outcome": "ok"})]
    events_append(run_id="rt-end", epoch=lease.epoch, expected_seq=0, events=events)
    assert _rows("rt-end") == {"acme", "globex"}
