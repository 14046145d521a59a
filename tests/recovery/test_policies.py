"""Policies, deadlines, key retention, value rules, unclassified tools, isolation and the commands."""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from recovery.adapters import Evidence
from recovery.models import PolicyChange, ToolPolicy, UncertainCall
from recovery.policies import PolicyError, policies_parse
from recovery.policy_changes import policies_load, policy_update
from recovery.reconcile import call_reconcile, reconcile_pass
from recovery.selectors import queue_figures_by_risk, uncertain_calls_filter
from runs.store import events_read
from tests.recovery.helpers import correction, crashed_run, policies_text

pytestmark = pytest.mark.django_db
S = UncertainCall.State
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def test_the_fixture_policies_parse():
    tools = {p.tool: p for p in policies_parse((FIXTURES / "policies.toml").read_text())}
    assert tools["post_correction"].risk_class == "irreversible" and tools["post_correction"].key_retention_s == 86400
    assert tools["notify_regulator"].strategy == "escalate"
    assert {p.tool for p in policies_parse((FIXTURES / "policies-demo.toml").read_text())} == set(tools)


@pytest.mark.parametrize(
    "text, message",
    [
        ('[tools.x]\nrisk_class = "dangerous"\nstrategy = "escalate"', "tool 'x': risk_class 'dangerous'"),
        ('[tools.x]\nrisk_class = "reversible"\nstrategy = "hope"', "tool 'x': strategy 'hope'"),
        ('[tools.x]\nrisk_class = "reversible"\nstrategy = "escalate"\ndeadline = "soon"', "tool 'x': deadline: 'soon'"),
        ('[tools.x]\nrisk_class = "reversible"\nstrategy = "escalate"\nlookup = { adapter = "ftp" }', "tool 'x': lookup: adapter 'ftp'"),
        ('[tools.x]\nrisk_class = "reversible"\nstrategy = "escalate"\ncolour = "red"', "unknown field 'colour'"),
        ('[tools.x]\nrisk_class = "reversible"\nstrategy = "compensate"', "needs a compensate adapter"),
        ('[tools.x]\nrisk_class = "reversible"\nstrategy = "escalate"\nrepeat = "twice"', "tool 'x': repeat 'twice' is not one of new, same"),
        ("[tools.x", "not valid TOML"),
    ],
)
def test_a_bad_policy_file_is_refused_whole_naming_tool_and_field(text, message):
    good = '[tools.fine]\nrisk_class = "read_only"\nstrategy = "escalate"\n'
    with pytest.raises(PolicyError, match=message.replace("(", r"\(")):
        policies_load(text=good + text, by="admin")
    assert not ToolPolicy.objects.exists()


def test_load_policies_exits_non_zero_with_a_one_line_reason(tmp_path):
    bad = tmp_path / "p.toml"
    bad.write_text('[tools.x]\nrisk_class = "dangerous"\nstrategy = "escalate"\n')
    with pytest.raises(CommandError, match="p.toml: tool 'x': risk_class"):
        call_command("load_policies", str(bad))
    out = StringIO()
    call_command("load_policies", str(FIXTURES / "policies.toml"), "--by", "admin", stdout=out)
    assert "post_correction: created" in out.getvalue()
    out = StringIO()
    call_command("load_policies", str(FIXTURES / "policies.toml"), stdout=out)
    assert "post_correction: unchanged" in out.getvalue()


def test_every_policy_change_is_recorded_with_who_and_the_before_and_after(policies):
    (call,) = crashed_run("run-p1", [("c1", "post_correction", correction())])
    assert call.deadline == call.started_at + timedelta(minutes=15)
    policy_update(tool="post_correction", fields={"deadline": "1h"}, by="maria.manager")
    change = PolicyChange.objects.filter(tool="post_correction").first()
    assert (change.by_name, change.source, change.before["deadline"], change.after["deadline"]) == ("maria.manager", "edit", "15m", "1h")
    call.refresh_from_db()
    assert call.deadline == call.started_at + timedelta(hours=1)
    with pytest.raises(PolicyError, match="risk_class"):
        policy_update(tool="post_correction", fields={"risk_class": "mostly_fine"}, by="maria.manager")


def test_a_tool_without_a_policy_is_irreversible_escalated_and_shown_unclassified(policies):
    (call,) = crashed_run("run-p2", [("c1", "wire_transfer", {"tenant": "acme", "amount": "5"})])
    assert (call.risk_class, call.unclassified) == ("irreversible", True)
    assert call_reconcile(pk=call.pk).action == "escalate"
    call.refresh_from_db()
    assert (call.state, call.escalation_reason) == (S.ESCALATED, "unclassified")


def test_a_value_rule_raises_the_risk_class(ledger, db):
    policies_load(
        text=policies_text(ledger.url, extra='[tools.issue_refund]\nrisk_class = "reversible"\nstrategy = "escalate"\nvalue_rules = [{ field = "amount", above = 1000, risk_class = "irreversible" }]\n'),
        by="admin",
    )
    small, big = crashed_run("run-p3", [("r1", "issue_refund", {"amount": "129.00"}), ("r2", "issue_refund", {"amount": "1500.00"})])
    assert (small.risk_class, big.risk_class) == ("reversible", "irreversible")


def test_an_overdue_irreversible_call_goes_to_a_person_at_once_while_reconciliation_keeps_trying(policies):
    ledger = policies
    long_ago = timezone.now() - timedelta(hours=1)
    (call,) = crashed_run("run-p4", [("c1", "post_correction", correction())], ts=long_ago)
    ledger.modes[call.idempotency_key] = "unavailable"
    figures = queue_figures_by_risk()["irreversible"]
    assert [o["pk"] for o in figures["overdue"]] == [call.pk]

    call_reconcile(pk=call.pk)
    call.refresh_from_db()
    assert (call.state, call.escalation_reason) == (S.ESCALATED, "overdue")
    assert uncertain_calls_filter().items[0].overdue

    # Overdue never blocks a resolution that evidence supports.
    del ledger.modes[call.idempotency_key]
    ledger.seed(call.idempotency_key, correction())
    assert call_reconcile(pk=call.pk).action == "complete"
    call.refresh_from_db()
    assert (call.state, call.disposition, call.approval_pending) == (S.RESOLVED, "completed", False)
    figures = queue_figures_by_risk()["irreversible"]
    assert (figures["opened"], figures["reconciled_automatically"], figures["escalated"], figures["still_open"], figures["overdue"]) == (1, 1, 1, 0, [])


def test_past_the_receivers_key_retention_automatic_retry_is_off(policies):
    ledger = policies
    (call,) = crashed_run("run-p5", [("c1", "post_correction", correction())], ts=timezone.now() - timedelta(hours=25))
    assert call.retry_window_closes_at < timezone.now()
    result = call_reconcile(pk=call.pk)
    assert (result.outcome, result.action) == ("absent", "escalate")
    assert ledger.executes == {}


def broken_lookup(*, call, spec, kind):
    raise RuntimeError("adapter bug")


def good_lookup(*, call, spec, kind):
    return Evidence("match", observed=call.arguments)


def test_one_broken_call_does_not_stop_the_others(ledger, db):
    extra = f"""
[tools.bad_template]
risk_class = "reversible"
strategy = "reconcile_then_retry"
lookup = {{ adapter = "http", url = "{ledger.url}/x/{{no_such_argument}}" }}

[tools.raises]
risk_class = "reversible"
strategy = "reconcile_then_retry"
lookup = {{ adapter = "python", path = "tests.recovery.test_policies.broken_lookup" }}

[tools.fine]
risk_class = "reversible"
strategy = "reconcile_then_retry"
lookup = {{ adapter = "python", path = "tests.recovery.test_policies.good_lookup" }}
"""
    policies_load(text=policies_text(ledger.url, extra=extra), by="admin")
    bad, raises, fine = crashed_run("run-p6", [("c1", "bad_template", {"a": 1}), ("c2", "raises", {"a": 2}), ("c3", "fine", {"a": 3})])

    summary = reconcile_pass()

    assert summary["errors"] == 0 and summary["acted"] == 3
    states = {r.tool: (r.state, r.last_error) for r in UncertainCall.objects.filter(run_id="run-p6")}
    assert states["fine"][0] == S.RESOLVED
    assert states["bad_template"][0] == S.RECONCILING and "no_such_argument" in states["bad_template"][1]
    assert states["raises"][0] == S.RECONCILING and "adapter bug" in states["raises"][1]
    # Marked with backoff: a due-only pass leaves them alone until their next attempt.
    assert reconcile_pass()["acted"] == 0


def test_uncertain_json_prints_the_contract_fields(policies):
    (call,) = crashed_run("run-p7", [("c1", "post_correction", correction())])
    out = StringIO()
    call_command("uncertain", "--json", stdout=out)
    (obj,) = json.loads(out.getvalue())
    assert list(obj) == ["run_id", "call_id", "tool", "idempotency_key", "arguments", "started_at", "start_seq", "risk_class", "deadline", "state", "possible_duplicate"]
    assert (obj["run_id"], obj["call_id"], obj["state"], obj["start_seq"]) == ("run-p7", "c1", "open", call.start_seq)
    with pytest.raises(CommandError, match="state 'lost'"):
        call_command("uncertain", "--state", "lost")


def test_reconcile_once_runs_a_pass_and_reports_it(policies):
    crashed_run("run-p8", [("c1", "post_correction", correction())])
    out = StringIO()
    call_command("reconcile", "--once", stdout=out)
    assert "attempted 1 (actions: retry 1)" in out.getvalue()
    assert [e.type for e in events_read(run_id="run-p8")][-1] == "tool_call_resolved"
    out = StringIO()
    call_command("rebuild_projections", stdout=out)
    assert "rebuilt 1 uncertain-call rows" in out.getvalue()


def test_the_scan_enqueues_due_calls_and_a_redelivered_batch_writes_nothing_twice(policies):
    from recovery.tasks import reconcile_calls, reconcile_scan

    ledger = policies
    (call,) = crashed_run("run-p9", [("c1", "post_correction", correction())])
    assert reconcile_scan.apply().get() == {"detected": 0, "queued": 1}  # eager: the batch ran already
    n = len(events_read(run_id="run-p9"))
    assert reconcile_calls.apply(args=[[[call.pk, 1]]]).get() == {"skipped": 1}
    assert len(events_read(run_id="run-p9")) == n
    assert ledger.effects == {call.idempotency_key: 1}


def test_an_http_error_quotes_the_url_without_the_arguments_it_was_filled_with(ledger, db):
    # An account number in a lookup path is what a policy marks sensitive; the error is stored in
    # the log and shown as the call's last error, where payload masking does not reach.
    extra = f"""
[tools.account_lookup]
risk_class = "reversible"
strategy = "reconcile_then_retry"
sensitive_fields = ["account"]
lookup = {{ adapter = "http", url = "{ledger.url}/accounts/{{account}}/operations/{{idempotency_key}}", timeout = "400ms" }}
"""
    policies_load(text=policies_text(ledger.url, extra=extra), by="admin")
    (call,) = crashed_run("run-p9", [("c1", "account_lookup", {"account": "GB29-SECRET-7731", "amount": "5.00"})])
    ledger.modes[call.idempotency_key] = "unavailable"

    result = call_reconcile(pk=call.pk)

    call.refresh_from_db()
    assert (result.outcome, call.state) == ("unavailable", UncertainCall.State.RECONCILING)
    assert call.last_error == f"GET {ledger.url}/accounts/{{account}}/operations/{call.idempotency_key}: HTTP 503"
    later = [e for e in events_read(run_id="run-p9") if e.type != "tool_call_started"]
    assert later and all("GB29-SECRET-7731" not in json.dumps(e.payload) for e in later)
    assert ledger.lookups[call.idempotency_key] == 1
