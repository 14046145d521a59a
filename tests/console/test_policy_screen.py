"""The administrators' policy editor: a change is recorded with who made it; a value the policy
parser refuses is named on the page and nothing changes."""

from __future__ import annotations

from recovery.models import PolicyChange, ToolPolicy
from tests.console.helpers import client_for


def test_an_administrator_changes_a_policy_and_the_change_is_recorded(admin_user, demo_policies):
    c = client_for(admin_user)
    r = c.post("/policies/", {"tool": "read_ledger", "deadline": "45m", "sensitive_fields": "account, iban"}, follow=True)
    assert r.status_code == 200 and "Policy for read_ledger saved." in r.content.decode()
    p = ToolPolicy.objects.get(tool="read_ledger")
    assert p.deadline_s == 45 * 60 and p.sensitive_fields == ["account", "iban"] and p.updated_by == admin_user.username
    assert PolicyChange.objects.filter(tool="read_ledger", by=admin_user).count() == 1


def test_a_value_the_parser_refuses_is_named_and_nothing_changes(admin_user, demo_policies):
    before = ToolPolicy.objects.get(tool="read_ledger").source
    c = client_for(admin_user)
    r = c.post("/policies/", {"tool": "read_ledger", "deadline": "soon"}, follow=True)
    assert "Policy not changed" in r.content.decode() and "soon" in r.content.decode()
    r = c.post("/policies/", {"tool": "", "deadline": "15m"}, follow=True)
    assert "Policy not changed: tool: This field is required." in r.content.decode()
    assert ToolPolicy.objects.get(tool="read_ledger").source == before
    assert not PolicyChange.objects.filter(by=admin_user).exists()
