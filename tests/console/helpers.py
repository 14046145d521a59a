"""What the console's tests (and others that act as its people) share: the fixture files, the one
password every actor signs in with, making a user in a role, a signed-in client, the conflict the
demo's policies escalate, and a queue of plain calls."""

from __future__ import annotations

import functools
from datetime import timedelta
from pathlib import Path

from django.utils import timezone

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


def client_for(user, *, csrf: bool = False):
    from django.test import Client

    c = Client(enforce_csrf_checks=csrf)
    if user is not None:
        c.force_login(user)
    return c


CONFLICT_ARGS = {"tenant": "acme", "account": "AC-4020", "amount": "840.00", "currency": "GBP", "period": "2026-Q3", "reference": "C-801"}
CONFLICT_LEDGER = {**CONFLICT_ARGS, "amount": "480.00"}


def _calls(n: int, **extra):
    from recovery.models import UncertainCall
    from runs.models import Run

    now = timezone.now()
    Run.objects.bulk_create([Run(run_id=f"run-{i}") for i in range((n + 9) // 10)])
    UncertainCall.objects.bulk_create(
        [
            UncertainCall(
                run_id=f"run-{i // 10}", call_id=f"c{i}", idempotency_key=f"key-{i:04d}", tool=extra.get("tool", "post_correction"), arguments={"amount": i},
                tenant=extra.get("tenant", "Acme-EU"), start_seq=i + 1, started_at=now - timedelta(minutes=i + 1), state="open", uncertain_seq=i + 1, deadline=now + timedelta(days=1),
            )
            for i in range(n)
        ]
    )
