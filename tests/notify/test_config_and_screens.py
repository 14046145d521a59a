"""Loading channels and routes, the claim endpoint as acknowledgement, and what the console shows."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from access.tokens import token_create
from notify.models import Channel, ConfigChange, Notification, Route
from tests.notify.helpers import SECRET, config_text, deliver_all, escalated

pytestmark = pytest.mark.django_db


def test_loading_a_file_says_what_it_changes_and_never_shows_a_secret(tmp_path, capsys, db):
    path = tmp_path / "notify.toml"
    path.write_text(config_text("http://127.0.0.1:9100"))
    call_command("load_notifications", str(path))
    first = capsys.readouterr().out
    assert "channel ops-webhook: added (webhook)" in first and "route 0: added" in first
    path.write_text(config_text("http://127.0.0.1:9200", repeat=None))
    call_command("load_notifications", str(path), "--dry-run")
    preview = capsys.readouterr().out.splitlines()
    assert "channel ops-webhook: changed (url)" in preview and "route 0: changed (repeat)" in preview and preview[-1] == "dry run: nothing was changed"
    assert Route.objects.get().repeat_s == 3600 and ConfigChange.objects.count() == 1  # the dry run changed nothing
    call_command("load_notifications", str(path), "--by", "dana")
    second = capsys.readouterr().out.splitlines()
    assert second == preview[:-1]
    assert "channel ops-webhook: changed (url)" in second and "channel oncall-mail: unchanged" in second and "route 0: changed (repeat)" in second
    assert Route.objects.get().repeat_s is None and Channel.objects.get(name="pager").config["url"] == "http://127.0.0.1:9200/pd"
    history = json.dumps([(c.before, c.after, c.summary) for c in ConfigChange.objects.all()])
    assert ConfigChange.objects.count() == 2 and SECRET not in history and "R0UT1NGKEY" not in history


@pytest.mark.parametrize(
    "bad, message",
    [
        ('[channels.x]\nkind = "fax"\n', "channels.x: kind 'fax' is not one of webhook, slack, pagerduty, email"),
        ('[channels.x]\nkind = "webhook"\nurl = "http://h/"\nsecret = "nope"\n', "channels.x: secret must be a Standard Webhooks secret"),
        ('[[routes]]\nlevels = [{ notify = ["ghost"], after = "0m" }]\n', "routes[0].levels[0]: notify names channel 'ghost', which the file does not define"),
        ('[channels.m]\nkind = "email"\nto = ["a@b.c"]\n[[routes]]\nlevels = [{ notify = ["m"], after = "5m" }]\n', "routes[0].levels[0]: the first level fires at once"),
        ('[channels.m]\nkind = "email"\nto = ["a@b.c"]\n[[routes]]\nrisk_class = ["dangerous"]\nlevels = [{ notify = ["m"] }]\n', "routes[0]: risk_class 'dangerous' is not one of"),
        ("[[routes]\n", "not valid TOML"),
    ],
)
def test_a_bad_file_is_refused_in_one_line_and_loads_nothing(tmp_path, db, bad, message):
    path = tmp_path / "bad.toml"
    path.write_text(bad)
    with pytest.raises(CommandError) as exc:
        call_command("load_notifications", str(path))
    assert message in str(exc.value) and "nothing was loaded" in str(exc.value) and "\n" not in str(exc.value)
    assert not Channel.objects.exists() and not Route.objects.exists()


def test_a_claim_through_the_api_acknowledges_and_the_call_screen_says_who_was_paged(routes, django_user_model):
    call = escalated("run-c1")
    deliver_all()
    _, secret = token_create(name="ops script", scopes=["read", "decide"])
    api = Client(HTTP_AUTHORIZATION=f"Bearer {secret}")
    r = api.post(f"/api/uncertain-calls/{call.pk}/claim", json.dumps({"seen_version": call.version}), content_type="application/json")
    assert r.status_code == 200, r.content
    assert r.json()["claimed_by"] == "api:ops script"
    deliver_all()
    assert routes.types() == ["call.escalated", "call.acknowledged"]
    stale = api.post(f"/api/uncertain-calls/{call.pk}/claim", json.dumps({"seen_version": call.version}), content_type="application/json")
    assert stale.status_code == 409
    assert Notification.objects.filter(type="call.acknowledged").count() == 2
    admin = django_user_model.objects.create_superuser("root", password="pw-long-enough-1")
    browser = Client()
    browser.force_login(admin)
    page = browser.get(f"/calls/{call.pk}/").content.decode()
    assert "paged: ops-webhook" in page and "oncall-mail" in page and "acknowledged by api:ops script" in page


def test_the_deliveries_screen_is_for_administrators_and_refuses_an_unknown_state(routes, django_user_model):
    escalated("run-c2")
    outsider = django_user_model.objects.create_user("eve", password="pw-long-enough-1")
    c = Client()
    c.force_login(outsider)
    assert c.get("/notifications/").status_code in (302, 403)
    admin = django_user_model.objects.create_superuser("root", password="pw-long-enough-1")
    c.force_login(admin)
    assert c.get("/notifications/?state=lost").status_code == 400
    page = c.get("/notifications/?state=pending")
    assert page.status_code == 200 and "call.escalated" in page.content.decode()
