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
resolve_within = "45m"
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


# --- the figures, counted by hand from CALLS and LIVE (as of END, no filter) -------------------

M = 60
D = 86400


def _times(key, value, calls, touched, touch, resolved, resolve):
    t = [v * M for v in touch] or [None, None, None]
    r = [v * M for v in resolve] or [None, None, None]
    return {key: value, "calls": calls, "touched": touched, "touch_p50_s": t[0], "touch_p90_s": t[1], "touch_max_s": t[2], "resolved": resolved, "resolve_p50_s": r[0], "resolve_p90_s": r[1], "resolve_max_s": r[2]}


EXPECTED = {
    # pay: p1-p6 and e2 of 7 + 3 live starts; refund r1-r4 of 4 + 4; lookup l1 l2 of 2 + 18.
    "volume": [
        {"tool": "lookup", "uncertain": 2, "recorded": 20, "per_thousand": 100.0},
        {"tool": "pay", "uncertain": 7, "recorded": 10, "per_thousand": 700.0},
        {"tool": "refund", "uncertain": 4, "recorded": 8, "per_thousand": 500.0},
        {"tool": "(all)", "uncertain": 13, "recorded": 38, "per_thousand": 342.1},
    ],
    "outcomes": [
        {"ended": "automatically", "outcome": "completed", "calls": 2},  # p4, l2
        {"ended": "automatically", "outcome": "retried", "calls": 1},  # r2
        {"ended": "automatically", "outcome": "not_happened", "calls": 1},  # r1
        {"ended": "automatically", "outcome": "compensated", "calls": 1},  # r3
        {"ended": "by a person", "outcome": "happened", "calls": 1},  # p1
        {"ended": "by a person", "outcome": "retry_same_key", "calls": 1},  # p6
        {"ended": "by a person", "outcome": "not_happened", "calls": 1},  # p2
        {"ended": "by a person", "outcome": "compensate", "calls": 1},  # p3
        {"ended": "by the run itself", "outcome": "completed", "calls": 1},  # l1
        {"ended": "still open", "outcome": "", "calls": 3},  # p5, r4, e2 (resolved after the end)
    ],
    # Nearest rank: p50 of n values is the ceil(n/2)-th, p90 the ceil(0.9 n)-th.
    # idempotent resolutions 5 30; reversible 10 15 45; irreversible touches 5 10 20 30 40 and
    # resolutions 20 40 50 95 200.
    "times-by-risk": [
        _times("risk_class", "idempotent", 2, 0, [], 2, [5, 30, 30]),
        _times("risk_class", "reversible", 4, 0, [], 3, [15, 45, 45]),
        _times("risk_class", "irreversible", 7, 5, [20, 40, 40], 5, [50, 200, 200]),
    ],
    "times-by-tool": [
        _times("tool", "lookup", 2, 0, [], 2, [5, 30, 30]),
        _times("tool", "pay", 7, 5, [20, 40, 40], 5, [50, 200, 200]),
        _times("tool", "refund", 4, 0, [], 3, [15, 45, 45]),
    ],
    "deadlines": [
        {"risk_class": "idempotent", "within": 1, "late": 1, "overdue": 0, "open_in_time": 0, "no_deadline": 0, "missed_pct": 50.0},
        {"risk_class": "reversible", "within": 2, "late": 1, "overdue": 1, "open_in_time": 0, "no_deadline": 0, "missed_pct": 50.0},
        {"risk_class": "irreversible", "within": 3, "late": 2, "overdue": 1, "open_in_time": 1, "no_deadline": 0, "missed_pct": 50.0},
    ],
    # call id, status, seconds past the deadline: p5 overdue from day 15 11:00 to the end, p6 140
    # minutes late, p3 35, r4 overdue 30, l2 20, r2 15.
    "worst": [("c-p5", "overdue", 12 * D + 13 * 3600), ("c-p6", "late", 140 * M), ("c-p3", "late", 35 * M), ("c-r4", "overdue", 30 * M), ("c-l2", "late", 20 * M), ("c-r2", "late", 15 * M)],
    # per day 0..27: opened, resolved (day 0: p1 and e1, opened the evening before), overdue at the end
    # (p5 from day 15, r4 on the last day).
    "trend": [
        (
            DAY0 + timedelta(days=i),
            {0: 1, 1: 1, 2: 1, 3: 1, 4: 1, 8: 1, 9: 1, 15: 1, 16: 1, 20: 1, 22: 1, 27: 2}.get(i, 0),
            {0: 2, 1: 1, 2: 1, 3: 1, 4: 1, 8: 1, 9: 1, 16: 1, 20: 1, 22: 1}.get(i, 0),
            0 if i < 15 else 1 if i < 27 else 2,
        )
        for i in range(28)
    ],
    # Against pay's resolve_within of 45 minutes: p1 (20) and p2 (40) met it; p3 (95), p4 (50), p6
    # (200) and p5 (open past 10:45 on day 15) breached it; e2 is not due before the end. The others
    # against their deadlines: r1 r3 l1 met, r2 l2 late, r4 open past it.
    "sla": [
        {"tool": "lookup", "target": "deadline", "target_s": None, "met": 1, "breached": 1, "pending": 0, "breach_pct": 50.0},
        {"tool": "pay", "target": "resolve_within", "target_s": 45 * M, "met": 2, "breached": 4, "pending": 1, "breach_pct": 66.7},
        {"tool": "refund", "target": "deadline", "target_s": None, "met": 2, "breached": 2, "pending": 0, "breach_pct": 50.0},
    ],
    # per day of opening: (met, breached, pending)
    "sla-trend": {0: (1, 0, 0), 1: (1, 0, 0), 2: (1, 0, 0), 3: (0, 1, 0), 4: (1, 0, 0), 8: (0, 1, 0), 9: (0, 1, 0), 15: (0, 1, 0), 16: (1, 0, 0), 20: (0, 1, 0), 22: (0, 1, 0), 27: (0, 1, 1)},
    # ann decided p1 p2 p6, held 10, 20 and 195 minutes; bob decided p3 (held 65 min) and holds p5
    # from day 15 10:40 to the end.
    "people": [
        {"person": "ann", "decided": 3, "claimed": 3, "claimed_wait_p50_s": 20 * M, "claimed_wait_max_s": 195 * M},
        {"person": "bob", "decided": 1, "claimed": 2, "claimed_wait_p50_s": 65 * M, "claimed_wait_max_s": 12 * D + 13 * 3600 + 20 * M},
    ],
}
