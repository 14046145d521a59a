"""bench/plans.py: the plan reader behind docs/recovery.md's table of the queue table's indexes.

PostgreSQL only (it reads EXPLAIN's JSON). Not a timed test: it checks that the statements a
request sends are found and that the indexes their plans use are named, bitmap scans included.
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import Client

from access.tokens import token_create
from bench.plans import indexes_unused, queue_plans, statement_plan
from tests.recovery.helpers import _uncertain_call

pytestmark = [pytest.mark.django_db, pytest.mark.skipif(connection.vendor != "postgresql", reason="reads PostgreSQL's EXPLAIN")]


def test_it_names_the_index_a_request_reads_the_queue_table_through():
    call = _uncertain_call("run-plan", "acme")
    _, secret = token_create(name="dashboard", scopes=["read"])
    plans = queue_plans(Client(), [("detail", f"/api/uncertain-calls/{call.pk}")], headers={"HTTP_AUTHORIZATION": f"Bearer {secret}"})
    assert plans and all(p["request"] == "detail" for p in plans)
    assert "reckon_uncertain_call_pkey" in plans[0]["indexes"]
    assert plans[0]["lines"][0].startswith("Index Scan using reckon_uncertain_call_pkey")


def test_a_bitmap_scan_is_credited_to_its_index():
    with connection.cursor() as c:
        c.execute("SET LOCAL enable_indexscan = off")
        c.execute("SET LOCAL enable_seqscan = off")
        plan = statement_plan("SELECT id FROM reckon_uncertain_call WHERE tool = 'x'", repeats=1)
    assert plan["indexes"] == ["reckon_uc_tool"]
    assert "Bitmap Index Scan using reckon_uc_tool" in plan["lines"]


def test_an_index_no_plan_uses_is_named_but_a_constraint_is_not():
    unused = indexes_unused([{"indexes": ["reckon_uc_tool"]}])
    assert "reckon_uc_tool" not in unused and "reckon_uc_due" in unused
    assert "reckon_uncertain_call_pkey" not in unused and "reckon_uncertain_run_start_uniq" not in unused
