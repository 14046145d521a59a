"""Administrators edit channels and routes in the console: each change checked as a file is,
recorded with who, the last one winning; a file is previewed before it is applied; secrets are
write-only (a blank field keeps the current one) and never appear in a page."""

from __future__ import annotations

import pytest
from django.test import Client

from notify.config import config_current, config_toml, notifications_load, notifications_preview
from notify.models import Channel, ConfigChange, Route
from tests.notify.helpers import SECRET, config_text

pytestmark = pytest.mark.django_db

NEW_SECRET = "whsec_bmV3LXNlY3JldC1vbmx5LWZvci10aGUtdGVzdA=="
PAGE = "/notifications/config/"


@pytest.fixture
def loaded(db):
    notifications_load(text=config_text("http://127.0.0.1:9100"), by="file")


def _admin(django_user_model, name="root") -> Client:
    c = Client()
    c.force_login(django_user_model.objects.create_superuser(name, password="pw-long-enough-1"))
    return c


def _messages(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def _secrets_absent(page: bytes) -> None:
    for secret in (SECRET, NEW_SECRET, "R0UT1NGKEY", SECRET[6:], NEW_SECRET[6:]):
        assert secret.encode() not in page


def test_an_admin_changes_a_channel_and_a_blank_secret_keeps_the_current_one(loaded, django_user_model):
    admin = _admin(django_user_model)
    page = admin.get(PAGE)
    assert page.status_code == 200 and b"ops-webhook" in page.content and b"secret set" in page.content
    _secrets_absent(page.content)
    r = admin.post(PAGE + "channel/", {"name": "ops-webhook", "kind": "webhook", "url": "http://127.0.0.1:9300/hooks", "secret": ""}, follow=True)
    assert _messages(r) == ["Channel ops-webhook: channel ops-webhook: changed (url)"]
    _secrets_absent(r.content)
    hook = Channel.objects.get(name="ops-webhook")
    assert hook.config == {"url": "http://127.0.0.1:9300/hooks", "secret": SECRET}
    change = ConfigChange.objects.first()
    assert (change.by, change.source, change.summary) == ("root", "console: channel ops-webhook", "channel ops-webhook: changed (url)")
    admin.post(PAGE + "channel/", {"name": "ops-webhook", "kind": "webhook", "url": "http://127.0.0.1:9300/hooks", "secret": NEW_SECRET})
    assert Channel.objects.get(name="ops-webhook").config["secret"] == NEW_SECRET
    assert ConfigChange.objects.first().summary == "channel ops-webhook: changed (secret)"
    page = admin.get(PAGE).content
    _secrets_absent(page)
    assert b"changed (secret)" in page
    assert NEW_SECRET not in str([(c.before, c.after, c.summary) for c in ConfigChange.objects.all()])


def test_the_last_change_wins_and_both_are_in_the_history(loaded, django_user_model):
    dana, sam = _admin(django_user_model, "dana"), _admin(django_user_model, "sam")
    for who, to in ((dana, "dana-team@example.com"), (sam, "night-shift@example.com, oncall@example.com")):
        who.post(PAGE + "channel/", {"name": "oncall-mail", "kind": "email", "to": to})
    assert Channel.objects.get(name="oncall-mail").config == {"to": ["night-shift@example.com", "oncall@example.com"]}
    assert [(c.by, c.summary) for c in ConfigChange.objects.all()[:2]] == [("sam", "channel oncall-mail: changed (to)"), ("dana", "channel oncall-mail: changed (to)")]


def test_a_bad_edit_is_refused_naming_the_field_and_changes_nothing(loaded, django_user_model):
    admin = _admin(django_user_model)
    before = config_current(), ConfigChange.objects.count()
    cases = [
        (PAGE + "channel/", {"name": "pager", "kind": "pagerduty", "url": "http://127.0.0.1:9100/pd", "remove": "1"}, "Channel not saved: channels.pager: route 0 notifies it; change the route first"),
        (PAGE + "channel/", {"name": "new-hook", "kind": "webhook", "url": "http://127.0.0.1:9/h", "secret": ""}, "Channel not saved: channels.new-hook: secret must be a Standard Webhooks secret"),
        (PAGE + "route/", {"position": "0", "levels": "0m: ops-webhook\n15m: ghost"}, "Route not saved: routes[0].levels[1]: notify names channel 'ghost'"),
        (PAGE + "route/", {"position": "0", "levels": "ops-webhook"}, 'Route not saved: levels: line 1: write a level as "DELAY: channel, channel"'),
        (PAGE + "route/", {"position": "7", "levels": "0m: ops-webhook"}, "Route not saved: routes[7]: there is no such route"),
    ]
    for url, data, message in cases:
        r = admin.post(url, data, follow=True)
        assert r.status_code == 200
        (said,) = _messages(r)
        assert said.startswith(message), said
    assert (config_current(), ConfigChange.objects.count()) == before


def test_an_admin_edits_adds_and_removes_routes(loaded, django_user_model):
    admin = _admin(django_user_model)
    r = admin.post(
        PAGE + "route/",
        {"position": "0", "risk_class": ["irreversible", "reversible"], "levels": "0m: ops-webhook\n30m: pager, team-slack", "repeat": "2h", "digest_notify": "oncall-mail", "digest_at": "07:30", "digest_timezone": "Europe/Paris"},
        follow=True,
    )
    assert _messages(r) == ["Routes: route 0: changed (risk_class, levels, repeat, digest)"]
    route = Route.objects.get()
    assert (route.risk_class, route.levels, route.repeat_s) == (["irreversible", "reversible"], [{"notify": ["ops-webhook"], "after_s": 0}, {"notify": ["pager", "team-slack"], "after_s": 1800}], 7200)
    assert route.digest == {"notify": ["oncall-mail"], "at": "07:30", "timezone": "Europe/Paris"}
    admin.post(PAGE + "route/", {"position": "", "tool": "post_correction", "levels": "0m: oncall-mail"})
    assert list(Route.objects.values_list("position", "tool")) == [(0, None), (1, ["post_correction"])]
    admin.post(PAGE + "route/", {"position": "0", "remove": "1"})
    assert list(Route.objects.values_list("position", "tool")) == [(0, ["post_correction"])]
    page = admin.get(PAGE).content.decode()
    assert "after 0m: oncall-mail" in page and "route 0 removed" in page


def test_a_file_is_previewed_then_applied_and_its_secrets_never_reach_a_page(loaded, django_user_model):
    admin = _admin(django_user_model)
    text = config_text("http://127.0.0.1:9200", repeat=None).replace(SECRET, NEW_SECRET)
    r = admin.post(PAGE + "preview/", {"text": text}, follow=True)
    page = r.content.decode()
    assert "channel ops-webhook: changed (secret, url)" in page and "route 0: changed (repeat)" in page and "Apply" in page
    _secrets_absent(r.content)
    assert Channel.objects.get(name="ops-webhook").config["secret"] == SECRET  # nothing applied yet
    assert admin.post(PAGE + "apply/", {"digest": "0" * 64}, follow=True).context["messages"]  # a stale form
    assert Channel.objects.get(name="ops-webhook").config["secret"] == SECRET
    r = admin.post(PAGE + "preview/", {"text": text}, follow=True)
    digest = r.context["pending"]["digest"]
    r = admin.post(PAGE + "apply/", {"digest": digest}, follow=True)
    (said,) = _messages(r)
    assert said.startswith("Loaded pasted text: ") and "channel ops-webhook: changed (secret, url)" in said
    _secrets_absent(r.content)
    assert Channel.objects.get(name="ops-webhook").config == {"url": "http://127.0.0.1:9200/hooks", "secret": NEW_SECRET}
    assert ConfigChange.objects.first().source == "console: file pasted text"
    assert admin.post(PAGE + "apply/", {"digest": digest}, follow=True).context["pending"] is None  # applied once


def test_a_bad_file_is_refused_in_the_console_and_loads_nothing(loaded, django_user_model):
    from django.core.files.uploadedfile import SimpleUploadedFile

    admin = _admin(django_user_model)
    upload = SimpleUploadedFile("notify.toml", b'[channels.x]\nkind = "fax"\n')
    r = admin.post(PAGE + "preview/", {"file": upload}, follow=True)
    assert _messages(r) == ["File not loaded: notify.toml: channels.x: kind 'fax' is not one of webhook, slack, pagerduty, email"]
    assert r.context["pending"] is None and not Channel.objects.filter(name="x").exists()


def test_the_export_leaves_secrets_out_and_loads_back_unchanged(loaded):
    text = config_toml(config_current())
    assert SECRET not in text and "R0UT1NGKEY" not in text and "[channels.ops-webhook]" in text
    assert all(line.endswith(": unchanged") for line in notifications_preview(text=text))


def test_only_administrators_see_or_change_the_configuration(loaded, django_user_model):
    outsider = Client()
    outsider.force_login(django_user_model.objects.create_user("eve", password="pw-long-enough-1"))
    assert outsider.get(PAGE).status_code == 403
    assert outsider.post(PAGE + "channel/", {"name": "ops-webhook", "kind": "webhook", "url": "http://evil.example/h"}).status_code == 403
    assert Channel.objects.get(name="ops-webhook").config["url"] == "http://127.0.0.1:9100/hooks"
