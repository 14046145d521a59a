"""A sensitive value is masked wherever it appears, not only under its JSON key.

A real ledger on 127.0.0.1 answers the lookups: for one call with a 503 HTML page that names the
account in prose, for another with a 200 JSON body whose key is written with an escape
(``"\\u0061ccount"``) and which observed a different account. A third call's retry is refused by
its receiver with an error that quotes the account. People then write the account into a note and
a decision's reason. Neither account may then appear in the bytes of any answer, console screen or
API document, to a manager's session or a read token, nor in the structured log lines; compliance
still reads both in the clear.
"""

from __future__ import annotations

import json
import logging

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.test import Client

from access.roles import roles_ensure
from access.tokens import token_create
from reckon.logging import JsonFormatter
from recovery.decisions import call_note, decision_record
from recovery.masking import MASK, SUBSTRING_MIN, sensitive_values, text_mask, value_mask
from recovery.models import UncertainCall
from recovery.policy_changes import policies_load
from recovery.reconcile import reconcile_pass
from tests.recovery.helpers import Ledger, crashed_run

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "4020-7777-SECRET"  # the account every call was made for
OBSERVED = "5050-8888-OBSERVED"  # the account the ledger says it posted one of them to
PASSWORD = "correct horse battery staple"


def refused_execute(*, call, spec, kind):
    """A receiver's client (the python adapter) that refuses the retry quoting the account."""
    return {"outcome": "failed", "error": f"account {call.arguments['account']} is closed", "status": 422}


def _policies(url: str) -> str:
    return f"""
[tools.post_correction]
risk_class       = "irreversible"
strategy         = "reconcile_then_retry"
semantic_fields  = ["tenant", "account", "amount"]
deadline         = "15m"
sensitive_fields = ["account"]
lookup = {{ adapter = "http", url = "{url}/operations/{{idempotency_key}}", timeout = "2s" }}

[tools.refund_account]
risk_class       = "reversible"
strategy         = "reconcile_then_retry"
semantic_fields  = ["tenant", "account", "amount"]
deadline         = "15m"
sensitive_fields = ["account"]
lookup  = {{ adapter = "http", url = "{url}/operations/{{idempotency_key}}", timeout = "2s" }}
execute = {{ adapter = "python", path = "tests.test_masking_by_value.refused_execute" }}
"""


class Lines(logging.Handler):
    """The structured log lines, exactly as the JSON formatter writes them."""

    def __init__(self):
        super().__init__(level=logging.DEBUG)
        self.setFormatter(JsonFormatter())
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(self.format(record))


@pytest.fixture
def log_lines():
    handler, logger = Lines(), logging.getLogger("reckon")
    logger.addHandler(handler)
    yield handler.lines
    logger.removeHandler(handler)


@pytest.fixture
def leaked(db, log_lines):
    """Three runs reconciled against a real ledger, then annotated and decided by people."""
    ledger = Ledger()
    try:
        roles_ensure()
        policies_load(text=_policies(ledger.url), by="dana.oncall")
        args = {"tenant": "acme", "account": SECRET, "amount": "840.00"}
        (html,) = crashed_run("run-html", [("c1", "post_correction", args)])
        (escaped,) = crashed_run("run-escaped", [("c1", "post_correction", args)])
        (refund,) = crashed_run("run-refund", [("c1", "refund_account", args)])
        ledger.canned[html.idempotency_key] = (503, "text/html; charset=utf-8", f"<html><body><p>account {SECRET} is locked</p></body></html>".encode())
        body = '{"\\u0061ccount": "' + OBSERVED + '", "tenant": "acme", "amount": "840.00", "id": "OP-9"}'
        ledger.canned[escaped.idempotency_key] = (200, "application/json", body.encode())
        summary = reconcile_pass(due_only=False)
        assert summary["errors"] == 0, summary
    finally:
        ledger.server.shutdown()
        ledger.server.server_close()
    oncall = _user("olivia.oncall", group="oncall")
    escaped.refresh_from_db()
    assert escaped.last_outcome == "conflict" and escaped.state == "escalated", (escaped.last_outcome, escaped.state)
    call_note(pk=html.pk, by=oncall, text=f"the customer says account {SECRET} is frozen")
    decision_record(pk=escaped.pk, decision="not_happened", by=oncall, reason=f"the ledger holds {OBSERVED}, not {SECRET}", seen_version=escaped.version)
    refund.refresh_from_db()
    assert refund.state == "resolved" and refund.disposition == "not_happened", (refund.state, refund.disposition)
    return {"runs": ["run-html", "run-escaped", "run-refund"], "calls": list(UncertainCall.objects.order_by("pk").values_list("pk", flat=True))}


def _user(username: str, *, group: str | None = None, perms: tuple[str, ...] = ()) -> User:
    u = User.objects.create_user(username, password=PASSWORD)
    if group:
        u.groups.add(Group.objects.get(name=group))
    u.user_permissions.add(*Permission.objects.filter(content_type__app_label="access", codename__in=perms))
    return u


def _session(user: User) -> Client:
    c = Client()
    c.force_login(user)
    return c


def _console_pages(leaked) -> list[str]:
    pages = ["/queue/", "/queue/?state=resolved", "/overview/", "/decisions/", "/runs/"]
    for run_id in leaked["runs"]:
        pages += [f"/runs/{run_id}/", f"/runs/{run_id}/?at=3"]
    pages += [f"/calls/{pk}/" for pk in leaked["calls"]]
    return pages


def _api_paths(leaked) -> list[str]:
    paths = ["/api/uncertain-calls?state=all", "/metrics"]
    for run_id in leaked["runs"]:
        paths += [f"/api/runs/{run_id}/events", f"/api/runs/{run_id}/state", f"/api/runs/{run_id}/state?at=3"]
    paths += [f"/api/uncertain-calls/{pk}" for pk in leaked["calls"]]
    return paths


def _read(client: Client, path: str, **headers) -> bytes:
    r = client.get(path, **headers)
    assert r.status_code == 200, (path, r.status_code, r.content[:300])
    return b"".join(r.streaming_content) if r.streaming else r.content  # exports stream


def _leaks(bodies: dict[str, bytes]) -> list[str]:
    return [f"{path} shows {s}" for path, body in bodies.items() for s in (SECRET, OBSERVED) if s.encode() in body or s.lower().encode() in body.lower()]


def test_a_managers_console_screens_never_show_a_sensitive_value_quoted_in_free_text(leaked):
    manager = _session(_user("mandy.manager", group="manager"))
    bodies = {p: _read(manager, p) for p in _console_pages(leaked)}
    assert _leaks(bodies) == []
    # Masked in place, the rest of the text still reads.
    html_call = bodies[f"/calls/{leaked['calls'][0]}/"].decode()
    assert f"account {MASK} is locked" in html_call
    assert f"the customer says account {MASK} is frozen" in html_call
    assert "the ledger holds [masked], not [masked]" in bodies["/decisions/"].decode()


def test_an_export_for_a_reader_without_view_sensitive_never_holds_a_sensitive_value(leaked):
    auditor = _session(_user("avery.auditor", perms=("view_console", "export_run")))
    bodies = {f"/runs/{r}/export.{fmt}": _read(auditor, f"/runs/{r}/export.{fmt}") for r in leaked["runs"] for fmt in ("jsonl", "csv")}
    assert _leaks(bodies) == []
    # Still the reference format, one JSON object per line.
    for line in bodies["/runs/run-escaped/export.jsonl"].decode().splitlines():
        json.loads(line)


def test_a_read_token_and_a_managers_session_read_no_sensitive_value_from_the_api_or_metrics(leaked):
    _, secret = token_create(name="dashboard", scopes=["read"])
    token = Client()
    manager = _session(_user("mandy.manager", group="manager"))
    bodies = {f"token {p}": _read(token, p, HTTP_AUTHORIZATION=f"Bearer {secret}") for p in _api_paths(leaked)}
    bodies |= {f"manager {p}": _read(manager, p) for p in _api_paths(leaked)}
    assert _leaks(bodies) == []
    detail = json.loads(bodies[f"token /api/uncertain-calls/{leaked['calls'][1]}"])
    (attempt,) = [a for a in detail["attempts"] if a.get("outcome") == "conflict"]
    assert json.loads(attempt["evidence"]["raw"])["account"] == MASK  # decoded, so the escape hid nothing


def test_the_structured_log_lines_hold_no_sensitive_value(leaked, log_lines):
    manager = _session(_user("mandy.manager", group="manager"))
    for p in _console_pages(leaked):
        _read(manager, p)
    decisions = [json.loads(line) for line in log_lines if '"recovery decision"' in line]
    assert any(d["event"] == "tool_call_resolved" and "is closed" in (d["rule"] or "") for d in decisions), decisions
    assert [line for line in log_lines if SECRET in line or OBSERVED in line] == []


def test_compliance_still_reads_every_value_in_the_clear(leaked):
    compliance = _session(_user("colin.compliance", group="compliance"))
    detail = _read(compliance, f"/api/uncertain-calls/{leaked['calls'][0]}").decode()
    assert f"account {SECRET} is locked" in detail
    events = _read(compliance, "/api/runs/run-escaped/events").decode()
    assert OBSERVED in events and SECRET in events
    export = _read(compliance, "/runs/run-refund/export.jsonl").decode()
    assert f"account {SECRET} is closed" in export


def test_the_value_rule_masks_long_values_anywhere_and_short_ones_only_as_whole_tokens():
    values = frozenset(sensitive_values({"arguments": {"account": "ab12", "pin": 7, "note": "x"}}, frozenset({"account", "pin"})))
    assert values == {"ab12", "7"}
    assert SUBSTRING_MIN == 4
    assert text_mask("xxAB12yy and 7 but not 17 or 7b", values) == f"xx{MASK}yy and {MASK} but not 17 or 7b"
    # JSON text is decoded first: a key written with an escape is still the key.
    shown = value_mask({"raw": '{"\\u0061ccount": "zz99"}'}, frozenset({"account"}))
    assert json.loads(shown["raw"]) == {"account": MASK}
    # A number equal to a sensitive value is masked as one; a reader who may see everything sees it all.
    assert value_mask({"n": 7, "s": "pin 7"}, frozenset({"pin"}), values) == {"n": MASK, "s": f"pin {MASK}"}
    assert value_mask({"s": "pin 7"}, frozenset(), values) == {"s": "pin 7"}


def test_refusing_a_decision_on_a_call_a_rule_resolved_does_not_quote_the_rules_text(leaked):
    _, secret = token_create(name="ops script", scopes=["read", "decide"])
    refund = leaked["calls"][2]
    body = {"decision": "not_happened", "reason": "again", "seen_version": UncertainCall.objects.get(pk=refund).version}
    r = Client().post(f"/api/uncertain-calls/{refund}/decisions", json.dumps(body), content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert r.status_code == 409 and r.json()["code"] == "not_decidable", r.content
    assert SECRET.encode() not in r.content
    assert "by a rule" in r.json()["detail"]


# --- issue 31 finding 4: every JSON value in a text, not only the first ------------------------------------

TWO_JSON = 'receiver said [1] {"account": "K-6543"}'  # the first JSON value ([1]) names nothing
# The accounts carry letters no hex digest has: a bundle's manifest is full of digests, and "6543" alone
# turns up in one now and then.


def test_a_sensitive_field_in_the_second_json_value_of_a_text_is_masked():
    fields = frozenset({"account"})
    assert sensitive_values({"content": TWO_JSON}, fields) == {"K-6543"}
    shown = value_mask({"content": TWO_JSON}, fields)
    assert "K-6543" not in json.dumps(shown), shown
    assert shown["content"].startswith("receiver said [1] ") and json.loads(shown["content"].removeprefix("receiver said [1] ")) == {"account": MASK}
    # Several values, an escaped key among them, the text between them kept.
    text = 'a {"x": 1} b [2, {"\\u0061ccount": "7777"}] c {"account": 8888} d'
    shown = value_mask(text, fields)
    assert "7777" not in shown and "8888" not in shown and shown.startswith('a {"x": 1} b ') and " c " in shown and shown.endswith(" d"), shown
    # Text that names a field but whose JSON is cut off is masked whole, after values that decode too.
    assert value_mask('[1] then {"account": "99', fields) == MASK
    assert value_mask('[1] and {"other": 2}', fields) == '[1] and {"other": 2}'


def test_two_json_values_in_a_message_are_masked_for_a_read_token_a_manager_and_the_masked_bundle(db):
    from access.tokens import principal_for_user
    from evidence.bundles import evidence_build
    from runs.leases import lease_acquire, lease_release
    from runs.store import NewEvent, events_append

    roles_ensure()
    policies_load(text=_policies("http://127.0.0.1:9"), by="test")
    lease = lease_acquire(run_id="run-two-json", holder="agent")
    events = [NewEvent("run_started", {"run_id": "run-two-json"}), NewEvent("user_message", {"content": TWO_JSON}), NewEvent("user_message", {"content": '{"account":"K-6544"}'})]
    events_append(run_id="run-two-json", epoch=lease.epoch, expected_seq=0, events=events)
    lease_release(run_id="run-two-json", epoch=lease.epoch)
    _, secret = token_create(name="dashboard", scopes=["read"])
    manager = _user("mandy.manager", group="manager")
    bodies = {
        "token events": _read(Client(), "/api/runs/run-two-json/events", HTTP_AUTHORIZATION=f"Bearer {secret}"),
        "token state": _read(Client(), "/api/runs/run-two-json/state", HTTP_AUTHORIZATION=f"Bearer {secret}"),
        "manager run screen": _read(_session(manager), "/runs/run-two-json/"),
        "manager events": _read(_session(manager), "/api/runs/run-two-json/events"),
    }
    files, result = evidence_build(run_id="run-two-json", masked=True, who=principal_for_user(manager))
    assert result.startswith("verified"), result
    bodies |= {f"bundle {name}": data for name, data in files.items()}
    assert [k for k, body in bodies.items() if b"K-6543" in body or b"K-6544" in body] == []
