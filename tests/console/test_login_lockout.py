"""Sign-in lockout (django-axes) through the console's real sign-in form: after the failure limit,
the right password is refused too, until the cool-off ends."""

from __future__ import annotations

import time
import uuid
from datetime import timedelta

from django.contrib.auth.models import User
from django.test import Client

PASSWORD = "correct horse battery staple"


def _sign_in(client: Client, username: str, password: str, addr: str):
    return client.post("/login/", {"username": username, "password": password}, REMOTE_ADDR=addr)


def test_repeated_failures_lock_the_user_out_until_the_cool_off_ends(db, settings):
    settings.AXES_FAILURE_LIMIT, settings.AXES_COOLOFF_TIME = 4, timedelta(seconds=2)
    User.objects.create_user("dana.oncall", password=PASSWORD)
    client, addr = Client(), f"10.9.{uuid.uuid4().int % 250}.7"
    answers = [_sign_in(client, "dana.oncall", f"guess-{i}", addr) for i in range(6)]
    assert [r.status_code for r in answers[:3]] == [200, 200, 200]  # the form again, with its error
    assert answers[4].status_code == 429 and answers[5].status_code == 429
    assert "too many login attempts" in answers[5].content.decode()
    locked = _sign_in(client, "dana.oncall", PASSWORD, addr)
    assert locked.status_code == 429 and "_auth_user_id" not in client.session
    # The lock is per user too: the same user from another address is refused as well.
    assert _sign_in(Client(), "dana.oncall", PASSWORD, "10.200.0.1").status_code == 429
    time.sleep(2.2)
    after = _sign_in(client, "dana.oncall", PASSWORD, addr)
    assert after.status_code == 302 and client.session["_auth_user_id"] == str(User.objects.get(username="dana.oncall").pk)


def test_an_address_trying_many_users_is_locked_out_for_every_user(db, settings):
    settings.AXES_FAILURE_LIMIT, settings.AXES_COOLOFF_TIME = 3, timedelta(seconds=60)
    User.objects.create_user("sam.compliance", password=PASSWORD)
    addr = f"10.8.{uuid.uuid4().int % 250}.9"
    for name in ("alice", "bob", "carol"):
        _sign_in(Client(), name, "wrong", addr)
    assert _sign_in(Client(), "sam.compliance", PASSWORD, addr).status_code == 429
    assert _sign_in(Client(), "sam.compliance", PASSWORD, "10.201.0.1").status_code == 302
