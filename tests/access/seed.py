"""Runs whose logs carry distinctive sensitive values in every place a value can sit: a call's
arguments and signature, the conflict evidence a lookup brought back, an error quoting the
receiver's JSON, a receiver's error page in plain text, raw JSON whose key is escaped
(``"\\u0061ccount"``), and a person's note. A response that contains one of ``SECRETS`` showed a
sensitive value unmasked."""

from __future__ import annotations

from pathlib import Path

from recovery.models import UncertainCall

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
SECRET = "ACCT-SECRET-4711"
OTHER_SECRET = "ACCT-SECRET-0815"
SECRETS = (SECRET, OTHER_SECRET)

ARGS = {"tenant": "acme", "account": SECRET, "amount": "840.00", "currency": "GBP", "period": "2026-Q3", "reference": "C-901"}
GLOBEX_ARGS = {"tenant": "globex", "account": OTHER_SECRET, "amount": "60.00", "currency": "EUR", "period": "2026-Q3", "reference": "C-903"}


def seed_runs() -> dict:
    """The acme conflict (escalated, with evidence and a quoted error) and a globex conflict; the
    demo policies mark ``account`` sensitive. Returns the runs, their calls and the reveal seq."""
    from demo.management.commands.demo import scenario_run_create
    from recovery.decisions import call_note
    from recovery.policy_changes import policies_load
    from recovery.reconcile import reconcile_pass
    from runs.leases import lease_acquire, lease_release
    from runs.store import NewEvent, events_append

    policies_load(text=(FIXTURES / "policies-demo.toml").read_text(encoding="utf-8"), by="test")
    scenario_run_create(run_id="run-acme", tool="post_correction", arguments=ARGS, started_minutes_ago=40, ledger={**ARGS, "amount": "480.00"})
    scenario_run_create(run_id="run-globex", tool="post_correction", arguments=GLOBEX_ARGS, started_minutes_ago=30, ledger={**GLOBEX_ARGS, "amount": "6.00"})
    reconcile_pass(due_only=False)
    call = UncertainCall.objects.get(run_id="run-acme")
    lease = lease_acquire(run_id="run-acme", holder="reconciler")
    quoted = f'HTTP 503 from the ledger: {{"account": "{SECRET}", "status": "locked"}}'
    attempt = {"call_id": call.call_id, "idempotency_key": call.idempotency_key, "start_seq": call.start_seq, "attempt": call.attempts + 1}
    attempt |= {"outcome": "unavailable", "evidence": {}, "error": quoted, "rule": "unavailable: look again later"}
    # A receiver's 503 page says the value in words; another answer hides the key behind an escape.
    page = {**attempt, "attempt": attempt["attempt"] + 1, "error": f"HTTP 503: <html><body>account {SECRET} is locked</body></html>"}
    page["evidence"] = {"status": 503, "body": '{"\\u0061ccount": "' + SECRET + '", "state": "locked"}'}
    events_append(run_id="run-acme", epoch=lease.epoch, expected_seq=lease.last_seq, events=[NewEvent("reconciliation_attempted", attempt), NewEvent("reconciliation_attempted", page)])
    lease_release(run_id="run-acme", epoch=lease.epoch)
    call_note(pk=call.pk, by="olivia", text=f"Customer on the phone confirms account {SECRET}; waiting for the ledger team.")
    call.refresh_from_db()
    assert SECRET in call.last_error and call.state == "escalated", (call.last_error, call.state)
    return {"run": "run-acme", "other_run": "run-globex", "call": call, "other_call": UncertainCall.objects.get(run_id="run-globex"), "seq": call.start_seq}


def secret_in(body: bytes) -> bool:
    return any(s.encode() in body for s in SECRETS)


def runs_shown(body: bytes) -> set[str]:
    """The runs whose sensitive values ``body`` shows unmasked."""
    return {run for s, run in ((SECRET, "run-acme"), (OTHER_SECRET, "run-globex")) if s.encode() in body}
