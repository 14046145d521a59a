"""Named actors for the console's tests: Olivia on call, Colin in compliance, Mandy the manager,
Otto the outsider (signed in, in no group), Ada the administrator, and an anonymous visitor."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import pytest

# Playwright's sync API runs an event loop in the test thread; Django refuses ORM calls from a thread
# with a running loop unless told that this is deliberate.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
PASSWORD = "correct horse battery staple"


@functools.cache
def _password_hash() -> str:
    """PASSWORD hashed once per test process by the configured hasher (PBKDF2, a third of a second
    a hash): every actor signs in with it, and hashing it again for each user of each test cost
    minutes of the suite. Signing in still checks it the full way."""
    from django.contrib.auth.hashers import make_password

    return make_password(PASSWORD)


def _user(username: str, group: str | None = None, **extra):
    from django.contrib.auth.models import Group, User

    u = User.objects.create_user(username, **extra)
    u.password = _password_hash()
    u.save(update_fields=["password"])
    if group:
        u.groups.add(Group.objects.get(name=group))
    return u


@pytest.fixture
def roles(db):
    from access.roles import roles_ensure

    roles_ensure()


@pytest.fixture
def oncall(roles):
    return _user("olivia.oncall", "oncall")


@pytest.fixture
def compliance(roles):
    return _user("colin.compliance", "compliance")


@pytest.fixture
def manager(roles):
    return _user("mandy.manager", "manager")


@pytest.fixture
def outsider(roles):
    return _user("otto.outsider")


@pytest.fixture
def admin_user(roles):
    return _user("ada.admin", is_staff=True, is_superuser=True)


@pytest.fixture
def actors(oncall, compliance, manager, outsider, admin_user):
    return {"oncall": oncall, "compliance": compliance, "manager": manager, "outsider": outsider, "admin": admin_user, "anonymous": None}


@pytest.fixture
def v1_runs(db):
    """The four v1 reference runs, imported as an operator would."""
    from runs.importer import paths_import

    results = paths_import([str(FIXTURES / "events" / "v1")])
    assert all(r.outcome == "imported" for r in results), [r.line() for r in results]
    return [r.run_id for r in results]


def client_for(user, *, csrf: bool = False):
    from django.test import Client

    c = Client(enforce_csrf_checks=csrf)
    if user is not None:
        c.force_login(user)
    return c


CONFLICT_ARGS = {"tenant": "acme", "account": "AC-4020", "amount": "840.00", "currency": "GBP", "period": "2026-Q3", "reference": "C-801"}
CONFLICT_LEDGER = {**CONFLICT_ARGS, "amount": "480.00"}


@pytest.fixture
def demo_policies(db):
    from recovery.policy_changes import policies_load

    policies_load(text=(FIXTURES / "policies-demo.toml").read_text(encoding="utf-8"), by="test")


@pytest.fixture
def conflict_call(demo_policies):
    """An escalated conflict: the agent posted 840.00, the ledger holds 480.00 under the same key."""
    from demo.management.commands.demo import scenario_run_create
    from recovery.models import UncertainCall
    from recovery.reconcile import reconcile_pass

    scenario_run_create(run_id="run-conflict", tool="post_correction", arguments=CONFLICT_ARGS, started_minutes_ago=40, ledger=CONFLICT_LEDGER)
    reconcile_pass(due_only=False)
    call = UncertainCall.objects.get(run_id="run-conflict")
    assert call.state == "escalated" and call.last_outcome == "conflict", (call.state, call.last_outcome)
    return call


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    """Debian's Chromium (tests/console/browser.py), never a downloaded browser build; flags keep it quiet and offline."""
    from tests.console.browser import CHROMIUM

    return {
        **browser_type_launch_args,
        "executable_path": CHROMIUM,
        "args": ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run"],
    }
