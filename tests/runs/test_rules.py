"""The read-model rules (``runs.rules``): each added once, handed to the store in the order of
``runs.rules.ORDER`` whatever order the apps add them in."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from notify import outbox
from recovery import projection_forms
from runs import rules, store, tenants
from runs.rules import ORDER, ReadModelRule, rule_add, rules_added


def test_every_rule_of_an_installed_app_is_handed_to_the_store_in_the_table_s_order():
    added = rules_added()
    assert [r.name for r in added] == [name for _app, name in ORDER]
    registered = [fn for fn, _types in store._PROJECTORS]
    assert registered == [r.apply for r in added]
    assert [r.name for r in added][1:] == ["uncertain calls", "decision log", "notification outbox", "recorded calls"]


def test_the_outbox_added_before_the_projection_still_runs_after_it(monkeypatch):
    """Apps loaded the other way round: the outbox waits for the rule before it."""
    monkeypatch.setattr(store, "_PROJECTORS", [])
    monkeypatch.setattr(store, "_STATEMENT_FORMS", {})
    monkeypatch.setattr(store, "_RIDER_FORMS", {})
    monkeypatch.setattr(store, "_PROJECTORS_BY_TYPE", {})
    monkeypatch.setattr(rules, "_ADDED", {})
    rule_add(outbox.RULE)
    assert store._PROJECTORS == []  # the run tenants and the projection are not added yet
    rule_add(tenants.RULE)
    assert [fn for fn, _ in store._PROJECTORS] == [tenants.RULE.apply]
    rule_add(projection_forms.RULE)
    assert [fn for fn, _ in store._PROJECTORS] == [tenants.RULE.apply, projection_forms.RULE.apply]  # the decision log is still missing
    rule_add(ReadModelRule("decision log", frozenset({"tool_call_uncertain"}), _log := (lambda run_id, events, epoch: None)))
    assert [fn for fn, _ in store._PROJECTORS] == [tenants.RULE.apply, projection_forms.RULE.apply, _log, outbox.RULE.apply]
    assert store._RIDER_FORMS == {tenants.RULE.apply: tenants.RULE.rider, projection_forms.RULE.apply: projection_forms.RULE.rider, outbox.RULE.apply: outbox.RULE.rider}


def test_a_rule_not_in_the_table_is_refused():
    with pytest.raises(ImproperlyConfigured, match="not in runs.rules.ORDER"):
        rule_add(ReadModelRule("a new read model", frozenset({"model_turn"}), lambda run_id, events, epoch: None))
