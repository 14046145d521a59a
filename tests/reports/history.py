"""A known history for the reports' tests, imported through the real importer (so the projection
derives every row from events), with times chosen so every figure can be counted by hand.

The period is the 28 UTC days from 2026-11-02 (a Monday) to 2026-11-29, both included; the tests
look at it after its end, so every figure is as of 2026-11-30 00:00 UTC. Three tools, one per risk
class, with deadlines of 60, 30 and 10 minutes; two tenants; two people (ann on the ledger team, bob).
The figures these calls must give are worked out in tests/reports/test_reports.py, beside each assertion.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

from recovery.policy_changes import policies_load
from runs.importer import log_import

UTC = timezone.utc
DAY0 = datetime(2026, 11, 2, tzinfo=UTC)
START, END = DAY0, DAY0 + timedelta(days=28)

POLICIES = """
[tools.pay]
risk_class = "irreversible"
strategy   = "escalate"
deadline   = "60m"
sensitive_fields = ["account"]

[tools.refund]
risk_class = "reversible"
strategy   = "escalate"
deadline   = "30m"

[tools.lookup]
risk_class = "idempotent"
strategy   = "escalate"
deadline   = "10m"
"""

# run, tool, tenant, start, then what happens, in minutes after the start:
#   ("auto", disposition, at)          a rule resolves it
#   ("person", who, claim_at, decision's disposition, at)
#   ("claim", who, at)                 claimed, never resolved
#   ("run", at)                        its own agent completes it after all
#   ()                                 nothing: still open
CALLS = [
    ("p1", "pay", "acme", DAY0 + timedelta(days=0, hours=10), ("person", "ann", 10, "completed", 20)),
    ("p2", "pay", "acme", DAY0 + timedelta(days=1, hours=10), ("person", "ann", 20, "not_happened", 40)),
    ("p3", "pay", "globex", DAY0 + timedelta(days=8, hours=10), ("person", "bob", 30, "compensated", 95)),
    ("p4", "pay", "globex", DAY0 + timedelta(days=9, hours=10), ("auto", "completed", 50)),
    ("p5", "pay", "acme", DAY0 + timedelta(days=15, hours=10), ("claim", "bob", 40)),
    ("p6", "pay", "acme", DAY0 + timedelta(days=22, hours=10), ("person", "ann", 5, "retried", 200)),
    ("r1", "refund", "globex", DAY0 + timedelta(days=2, hours=9), ("auto", "not_happened", 15)),
    ("r2", "refund", "globex", DAY0 + timedelta(days=3, hours=9), ("auto", "retried", 45)),
    ("r3", "refund", "acme", DAY0 + timedelta(days=16, hours=9), ("auto", "compensated", 10)),
    ("r4", "refund", "acme", DAY0 + timedelta(days=27, hours=23), ()),
    ("l1", "lookup", "acme", DAY0 + timedelta(days=4, hours=12), ("run", 5)),
    ("l2", "lookup", "globex", DAY0 + timedelta(days=20, hours=12), ("auto", "completed", 30)),
    # The edges: opened the evening before the period, resolved inside it; opened on its last
    # evening, resolved after it; opened after it.
    ("e1", "pay", "acme", DAY0 - timedelta(hours=1), ("auto", "completed", 90)),
    ("e2", "pay", "globex", END - timedelta(minutes=10), ("auto", "completed", 30)),
    ("e3", "refund", "acme", END + timedelta(hours=1), ("auto", "completed", 5)),
]
# Calls completed live (never uncertain): recorded calls of each tool in the period, all of acme.
LIVE = {"pay": 3, "refund": 4, "lookup": 18}


def _ts(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _line(seq: int, type_: str, t: datetime, payload: dict) -> str:
    return json.dumps({"seq": seq, "v": 2, "type": type_, "ts": _ts(t), "payload": payload})


def _call_log(run: str, tool: str, tenant: str, t0: datetime, then: tuple) -> list[str]:
    key = f"key-{run}"
    about = {"call_id": f"c-{run}", "idempotency_key": key}
    at = lambda m: t0 + timedelta(minutes=m)  # noqa: E731
    ev = [
        ("run_started", t0 - timedelta(seconds=1), {"run_id": f"run-{run}"}),
        ("tool_call_started", t0, {**about, "name": tool, "arguments": {"account": f"ACCT-{run}-9931", "tenant": tenant}, "signature": f"{tool}:{run}", "tenant": tenant}),
        ("tool_call_uncertain", at(1), {**about, "start_seq": 2, "reason": "the worker died"}),
    ]
    kind = then[0] if then else ""
    if kind == "auto":
        _, disp, m = then
        ev.append(("reconciliation_attempted", at(m), {"idempotency_key": key, "attempt": 1, "outcome": "match", "evidence": {}, "error": None, "rule": "rule"}))
        ev.append(("tool_call_resolved", at(m), {"idempotency_key": key, "disposition": disp, "rule": f"settled {disp}"}))
    elif kind == "person":
        _, who, claim, disp, m = then
        ev.append(("approval_requested", at(2), {**about, "question": "what now?", "reason": "policy"}))
        ev.append(("operator_note", at(claim), {**about, "by": who, "text": f"{who} claimed the call", "action": "claim"}))
        ev.append(("approval_decided", at(m), {**about, "approved": True, "by": who, "reason": "checked", "decision": disp}))
        ev.append(("tool_call_resolved", at(m), {"idempotency_key": key, "disposition": disp, "by": who}))
    elif kind == "claim":
        _, who, claim = then
        ev.append(("operator_note", at(claim), {**about, "by": who, "text": f"{who} claimed the call", "action": "claim"}))
    elif kind == "run":
        ev.append(("tool_call_completed", at(then[1]), {**about, "name": tool, "content": "ok", "is_error": False, "signature": f"{tool}:{run}"}))
    return [_line(i + 1, t, ts, p) for i, (t, ts, p) in enumerate(ev)]


def _live_log() -> list[str]:
    lines = [_line(1, "run_started", DAY0 + timedelta(days=5), {"run_id": "run-live"})]
    t = DAY0 + timedelta(days=5, hours=1)
    for tool, n in LIVE.items():
        for i in range(n):
            about = {"call_id": f"live-{tool}-{i}", "idempotency_key": f"key-live-{tool}-{i}"}
            lines.append(_line(len(lines) + 1, "tool_call_started", t, {**about, "name": tool, "arguments": {"tenant": "acme"}, "signature": f"{tool}:{i}", "tenant": "acme"}))
            lines.append(_line(len(lines) + 1, "tool_call_completed", t + timedelta(seconds=2), {**about, "name": tool, "content": "ok", "is_error": False, "signature": f"{tool}:{i}"}))
            t += timedelta(minutes=1)
    return lines


def history_build() -> None:
    """Load the policies and import every run of the history."""
    policies_load(text=POLICIES, by="test")
    for run, tool, tenant, t0, then in CALLS:
        result = log_import(f"run-{run}.jsonl", ("\n".join(_call_log(run, tool, tenant, t0, then)) + "\n").encode())
        assert result.outcome == "imported", result
    result = log_import("run-live.jsonl", ("\n".join(_live_log()) + "\n").encode())
    assert result.outcome == "imported", result
