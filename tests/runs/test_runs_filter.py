"""``runs.selectors.runs_filter``: the run list behind GET /api/runs, without HTTP."""

from __future__ import annotations

import pytest

from runs.leases import lease_release
from runs.models import Run
from runs.selectors import runs_filter
from runs.tenants import run_tenant_claim
from tests.runs.helpers import working_run

pytestmark = pytest.mark.django_db


def ids(page):
    return [r.run_id for r in page.runs]


def test_filters_pages_and_the_callers_scope():
    for i in range(4):
        lease = working_run(f"run-{i}", 2)
        if i % 2:
            lease_release(run_id=f"run-{i}", epoch=lease.epoch)
    run_tenant_claim(run_id="run-2", tenant="acme")
    everything = ids(runs_filter(limit=10))
    assert sorted(everything) == ["run-0", "run-1", "run-2", "run-3"]

    first = runs_filter(limit=3)
    assert first.more and ids(first) == everything[:3]
    last = first.runs[-1]
    rest = runs_filter(limit=3, after=(last.created_at, last.run_id))
    assert not rest.more and set(ids(first) + ids(rest)) == set(everything)

    assert ids(runs_filter(leased=True, limit=10)) == [r for r in everything if r in ("run-0", "run-2")]
    assert ids(runs_filter(tenant="acme")) == ["run-2"]
    assert runs_filter(limit=10).tenants == {"run-0": {"default"}, "run-1": {"default"}, "run-2": {"acme"}, "run-3": {"default"}}
    assert ids(runs_filter(run_id_prefix="run-3")) == ["run-3"]
    # The scope is applied before every filter: here, a caller that may only see run-1 and run-2.
    scope = lambda qs: qs.filter(run_id__in=["run-1", "run-2"])  # noqa: E731
    assert sorted(ids(runs_filter(scope=scope, limit=10))) == ["run-1", "run-2"]
    assert ids(runs_filter(scope=scope, finished=True)) == []
    assert Run.objects.count() == 4


def test_a_cursor_page_starts_after_the_previous_pages_last_run():
    for i in range(3):
        working_run(f"run-{i}", 1)
    first = runs_filter(limit=2)
    last = first.runs[-1]
    rest = runs_filter(limit=2, after=(last.created_at, last.run_id))
    assert not set(ids(first)) & set(ids(rest))
