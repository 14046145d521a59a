"""``bench console``'s plans of the worker's own reads: one plan for each statement shape."""

import pytest
from django.db import connection

from bench.plans import statements_plans

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


def test_a_statement_sent_once_per_run_is_planned_once_and_each_other_shape_once():
    def reads():
        with connection.cursor() as cur:
            for run_id in ["run-a", "run-b", "it's run-c"]:
                cur.execute("SELECT id FROM reckon_uncertain_call WHERE run_id = %s AND start_seq > %s", [run_id, 7])
            cur.execute("SELECT count(*) FROM reckon_uncertain_call WHERE start_seq > %s", [3])
            cur.execute("SELECT count(*) FROM reckon_run")  # not the queue table: not planned

    plans = statements_plans("worker", reads)
    assert [p["request"] for p in plans] == ["worker", "worker"]
    assert "'run-a'" in plans[0]["sql"] and "count(*)" in plans[1]["sql"]
    assert all(p["lines"] for p in plans)
