"""The call rows' hand-written reads and writes (recovery/rows.py) prepare values as the ORM does."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from django.db import connection, connections

from recovery.models import UncertainCall
from recovery.rows import _SLOW, CALL_COLUMNS, _prepared, row_copy

_SAMPLES = [None, "", "resolved", UncertainCall.State.RESOLVED, 0, 7, 2**40, True, False, 1.5, 0.0, datetime(2026, 12, 1, 11, 0, tzinfo=timezone.utc), datetime(2026, 12, 1, 11, 0)]


@pytest.mark.skipif(connection.vendor != "postgresql", reason="values are passed as they are on PostgreSQL only")
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # a naive datetime, which is never passed as it is
def test_a_value_passed_as_it_is_is_what_the_orm_would_have_prepared(db):
    checked = 0
    db = connections["default"]  # the backend itself, as the rows' writers pass it
    for field in CALL_COLUMNS.fields:
        for value in _SAMPLES:
            fast = _prepared(field, value, db)
            if fast is _SLOW:
                continue
            prepared = field.get_db_prep_save(value, db)
            assert prepared == fast and type(prepared) is type(fast), (field.name, value, prepared, fast)
            checked += 1
    assert checked > 60  # every kind of column had values prepared the fast way


def test_a_choice_a_naive_time_or_a_bool_counted_as_a_number_takes_the_orms_way():
    field = UncertainCall._meta.get_field
    assert _prepared(field("state"), UncertainCall.State.RESOLVED, connection) is _SLOW
    assert _prepared(field("started_at"), datetime(2026, 12, 1, 11, 0), connection) is _SLOW
    assert _prepared(field("attempts"), True, connection) is _SLOW
    assert _prepared(field("arguments"), {"a": 1}, connection) is _SLOW


def test_a_copy_of_a_row_changes_without_changing_the_row():
    row = UncertainCall(run_id="r", call_id="c", idempotency_key="k", tool="t", start_seq=2, started_at=datetime(2026, 12, 1, tzinfo=timezone.utc), attempts=1)
    clone = row_copy(row)
    clone.attempts = 2
    clone.state = UncertainCall.State.RESOLVED
    assert (row.attempts, row.state, clone.attempts) == (1, UncertainCall.State.IN_FLIGHT, 2)
    assert clone._state is not row._state and clone._state.adding == row._state.adding
