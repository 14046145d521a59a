"""A completion that names another call's key (docs/recovery.md), in the fold.

``started(c1, K1)``, ``started(c2, K2)``, ``completed(c2, key=K1)``: the completion pairs with c2 by
call id. c1 stays uncertain and K1 stays out of the completed keys the client trusts, until c1
itself is settled."""

from __future__ import annotations

from runs.fold import fold
from tests.runs.helpers import completed, log, started

MISMATCH = (started("c1", key="K1"), started("c2", "post_correction", {"amount": "480.00"}, key="K2"), completed("c2", content="OP-2", key="K1"))


def test_it_keeps_the_call_whose_key_another_calls_completion_names_uncertain():
    st = fold(log(*MISMATCH))
    assert [(c.call_id, c.idempotency_key) for c in st.uncertain_calls] == [("c1", "K1")]


def test_it_keeps_that_key_out_of_the_completed_calls_the_client_trusts():
    st = fold(log(*MISMATCH))
    assert "K1" not in st.completed_calls, "a resumed agent would skip c1 on the strength of c2's completion"


def test_it_completes_the_call_the_completion_pairs_with_by_call_id_under_that_calls_key():
    st = fold(log(*MISMATCH))
    assert st.completed_calls == {"K2": "OP-2"}
    assert [m.call_id for m in st.messages if m.role == "tool"] == ["c2"]


def test_it_completes_the_named_key_once_the_call_itself_is_settled():
    st = fold(log(*MISMATCH, completed("c1", content={"recorded_by": "olivia.oncall"}, key="K1", source="operator")))
    assert st.uncertain_calls == []
    assert st.completed_calls == {"K2": "OP-2", "K1": {"recorded_by": "olivia.oncall"}}


def test_it_treats_a_proven_failure_that_names_another_calls_key_as_occupying_no_key():
    st = fold(log(started("c1", key="K1"), started("c2", key="K2"), completed("c2", content="declined", key="K1", is_error=True)))
    assert [c.call_id for c in st.uncertain_calls] == ["c1"] and st.completed_calls == {}
