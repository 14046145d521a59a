"""Outbound calls reach only receivers Reckon may call (recovery/outbound.py, issue 31 finding 15).

Lookups, retries, webhooks, Slack and PagerDuty are refused, both when their URL is configured and
when it is called, for a URL that is not http(s), that carries credentials, or whose host resolves
to a loopback, link-local (169.254.169.254), private, multicast, unspecified or reserved address,
unless RECKON_OUTBOUND_ALLOW names the host. Real servers on 127.0.0.1 stand in for the services an
attacker would aim at: the suite allows 127.0.0.1 for its own receivers (tests/session_env.py), and
each test here says which of them it allows. No redirect is followed, and a receiver's answer is
kept and shown short and masked.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from django.test import Client
from django.utils import timezone as djtz

from access.tokens import token_create
from notify.config import NotifyConfigError, notifications_load
from notify.models import DeliveryAttempt
from recovery import adapters
from recovery.adapters import RAW_LIMIT, AdapterError, CallRef
from recovery.masking import MASK
from recovery.models import ToolPolicy
from recovery.outbound import OutboundRefused, url_check
from recovery.policies import PolicyError
from recovery.policy_changes import policies_load
from recovery.reconcile import call_reconcile
from recovery.selectors import uncertain_call_evidence
from tests.helpers import serve_in_thread
from tests.notify.helpers import SECRET, Receiver, config_text, deliver_all, escalated, tick
from tests.recovery.helpers import correction, crashed_run

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]
ACCOUNT = "4020-7777-SECRET"
REF = CallRef("run-out", "c1", "key-1", "post_correction", {"account": ACCOUNT})


class Service:
    """A server on 127.0.0.1 that counts what it is asked and answers each path as scripted:
    ``answers[path] = (status, headers, body)``; anything else is 200 ``{}``."""

    def __init__(self):
        self.hits: list[str] = []
        self.answers: dict[str, tuple[int, dict, bytes]] = {}
        svc = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _answer(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0) or 0))
                svc.hits.append(self.path)
                status, headers, body = svc.answers.get(self.path, (200, {"Content-Type": "application/json"}, b"{}"))
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        serve_in_thread(self.server)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture
def service():
    svc = Service()
    yield svc
    svc.server.shutdown()
    svc.server.server_close()


@pytest.fixture
def internal():
    """A second server on 127.0.0.1 standing in for an internal service nobody allowed."""
    svc = Service()
    yield svc
    svc.server.shutdown()
    svc.server.server_close()


@pytest.fixture
def receiver():
    rec = Receiver()
    yield rec
    rec.server.shutdown()
    rec.server.server_close()


def _only(settings, *hosts: str) -> None:
    settings.RECKON_OUTBOUND_ALLOW = tuple(hosts)


def _policy(url: str) -> str:
    return f'[tools.t]\nrisk_class = "idempotent"\nstrategy = "escalate"\nlookup = {{ adapter = "http", url = "{url}" }}\n'


# --- when a URL is configured --------------------------------------------------------------------


def test_a_lookup_url_to_a_host_not_allowed_is_refused_when_the_policy_is_written(settings, service):
    _only(settings, "127.0.0.1:1")  # another port of the same host: not this receiver
    with pytest.raises(PolicyError) as refused:
        policies_load(text=_policy(f"{service.url}/operations/{{idempotency_key}}"), by="admin")
    message = str(refused.value)
    assert message.startswith("tool 't': lookup: url 'http://127.0.0.1:") and "/operations/{idempotency_key}'" in message
    assert f"127.0.0.1 port {service.port} is refused: 127.0.0.1 is a loopback address" in message and "RECKON_OUTBOUND_ALLOW" in message
    _only(settings, f"127.0.0.1:{service.port}")
    policies_load(text=_policy(f"{service.url}/operations/{{idempotency_key}}"), by="admin")
    assert ToolPolicy.objects.get().lookup["url"] == f"{service.url}/operations/{{idempotency_key}}"
    assert service.hits == []  # configuring calls nothing


@pytest.mark.parametrize(
    "url, why",
    [
        ("http://169.254.169.254/latest/meta-data/", "169.254.169.254 is a link-local address"),
        ("http://[::ffff:169.254.169.254]/latest/", "::ffff:169.254.169.254 is a link-local address"),
        ("http://10.0.0.7:8200/api/openapi.json", "10.0.0.7 is a private address"),
        ("http://224.0.0.1/", "224.0.0.1 is a multicast address"),
        ("http://0.0.0.0:5432/", "0.0.0.0 is a unspecified address"),
        ("http://localhost:6379/", "localhost (127.0.0.1) port 6379 is refused: 127.0.0.1 is a loopback address"),
        ("http://2130706433:5432/", "2130706433 (127.0.0.1) port 5432 is refused"),
        ("http://user:hunter2@ledger.example/ops", "must not carry credentials"),
        ("http://{host}/ops", "the host must be written out"),
    ],
)
def test_a_url_reaching_an_internal_address_or_carrying_credentials_is_refused_for_lookups_and_channels(settings, url, why):
    _only(settings)
    with pytest.raises(PolicyError, match=f"tool 't': lookup: url .*{_re(why)}"):
        policies_load(text=_policy(url), by="admin")
    hook = f'[channels.ops-webhook]\nkind = "webhook"\nurl = "{url}"\nsecret = "{SECRET}"\n'
    with pytest.raises(NotifyConfigError, match=f"channels.ops-webhook: url .*{_re(why)}"):
        notifications_load(text=hook, by="admin")
    for kind, extra in (("slack", ""), ("pagerduty", 'routing_key = "R0UT1NG"\n')):
        with pytest.raises(NotifyConfigError, match=f"channels.x: url .*{_re(why)}"):
            notifications_load(text=f'[channels.x]\nkind = "{kind}"\nurl = "{url}"\n{extra}', by="admin")
    with pytest.raises(OutboundRefused) as refused:
        url_check(url)
    assert "hunter2" not in str(refused.value)


def _re(text: str) -> str:
    return re.escape(text)


def test_a_scheme_other_than_http_is_refused_for_lookups_and_channels():
    for url in ("file:///etc/passwd", "gopher://127.0.0.1:6379/_INFO", "ftp://ledger.example/"):
        with pytest.raises(PolicyError, match="must be an http:// or https:// URL"):
            policies_load(text=_policy(url), by="admin")
        with pytest.raises(NotifyConfigError, match="url must be an http:// or https:// URL"):
            notifications_load(text=f'[channels.x]\nkind = "slack"\nurl = "{url}"\n', by="admin")
        with pytest.raises(OutboundRefused, match="only http:// and https:// URLs are called"):
            url_check(url)


def test_a_console_channel_form_naming_the_metadata_address_is_refused(settings, admin_client):
    from notify.models import Channel

    r = admin_client.post("/notifications/config/channel/", {"name": "meta", "kind": "slack", "url": "http://169.254.169.254/latest/meta-data/"}, follow=True)
    assert r.status_code == 200 and b"169.254.169.254 is a link-local address" in r.content
    assert not Channel.objects.filter(name="meta").exists()


# --- when it is called --------------------------------------------------------------------------


def test_an_allowed_receiver_is_called_and_one_not_allowed_is_refused_when_the_lookup_runs(settings, policies):
    ledger = policies  # the policies were written while the suite allowed 127.0.0.1
    (call,) = crashed_run("run-out-1", [("c1", "post_correction", correction())])
    _only(settings, "127.0.0.1:1")
    result = call_reconcile(pk=call.pk)
    assert call.idempotency_key not in ledger.lookups  # never asked
    (attempt,) = uncertain_call_evidence(pk=call.pk)["attempts"]
    assert attempt["outcome"] == "unavailable" and result.outcome == "unavailable"
    assert attempt["error"].startswith("broken policy for post_correction: GET http://127.0.0.1:")
    assert f"127.0.0.1 port {ledger.port} is refused: 127.0.0.1 is a loopback address" in attempt["error"] and "RECKON_OUTBOUND_ALLOW" in attempt["error"]
    # Named, the same receiver is asked.
    _only(settings, f"127.0.0.1:{ledger.port}")
    call_reconcile(pk=call.pk)
    assert ledger.lookups.get(call.idempotency_key) == 1


def test_the_check_at_call_time_refuses_what_configuration_never_saw(settings, internal):
    """A policy stored before the check existed, or a host whose name now resolves elsewhere: the
    connection itself checks, so nothing reaches the internal service."""
    _only(settings)
    for url in (f"{internal.url}/api/openapi.json", f"http://localhost:{internal.port}/x", "http://169.254.169.254/latest/meta-data/"):
        with pytest.raises(AdapterError, match="is refused: .* address, which Reckon does not call unless RECKON_OUTBOUND_ALLOW names the host"):
            adapters.lookup(REF, {"adapter": "http", "url": url, "timeout_s": 1.0}, ())
        with pytest.raises(AdapterError, match="is refused"):
            adapters.execute(REF, {"adapter": "http", "url": url, "method": "POST", "timeout_s": 1.0})
    for url in (f"http://u:p@127.0.0.1:{internal.port}/x", f"gopher://127.0.0.1:{internal.port}/_x"):
        with pytest.raises(OutboundRefused):
            adapters.http_request("GET", url, timeout=1.0)
    # Allowed by name only: the address 127.0.0.1 does not allow the name localhost, nor the reverse.
    _only(settings, "localhost")
    with pytest.raises(AdapterError, match="is refused"):
        adapters.lookup(REF, {"adapter": "http", "url": f"{internal.url}/x", "timeout_s": 1.0}, ())
    assert internal.hits == []
    assert adapters.lookup(REF, {"adapter": "http", "url": f"http://localhost:{internal.port}/x", "timeout_s": 1.0}, ()).status == 200
    assert internal.hits == ["/x"]


def test_a_redirect_from_an_allowed_receiver_to_a_refused_address_is_not_followed(settings, service, internal):
    _only(settings, f"127.0.0.1:{service.port}")
    service.answers["/operations/key-1"] = (302, {"Location": f"{internal.url}/api/openapi.json"}, b"")
    service.answers["/meta"] = (307, {"Location": "http://169.254.169.254/latest/meta-data/iam/"}, b"")
    ev = adapters.lookup(REF, {"adapter": "http", "url": f"{service.url}/operations/{{idempotency_key}}", "timeout_s": 1.0}, ())
    assert (ev.outcome, ev.status) == ("unavailable", 302)
    done = adapters.execute(REF, {"adapter": "http", "url": f"{service.url}/meta", "method": "POST", "timeout_s": 1.0})
    assert (done.outcome, done.status) == ("uncertain", 307)
    assert service.hits == ["/operations/key-1", "/meta"] and internal.hits == []


def test_webhook_slack_and_pagerduty_to_a_host_not_allowed_are_refused_at_delivery_and_delivered_once_allowed(settings, receiver, policies):
    notifications_load(text=config_text(receiver.url), by="admin")  # written while the suite allowed 127.0.0.1
    _only(settings, f"127.0.0.1:{policies.port}")  # the ledger, which the lookup asks; not the channels' receiver
    escalated("run-out-2")
    later = djtz.now() + timedelta(minutes=16)
    assert len(tick(later)) == 2  # level 2: PagerDuty and Slack
    deliver_all(now=later)
    refused = dict(DeliveryAttempt.objects.exclude(notification__channel="oncall-mail").values_list("notification__channel", "error"))
    assert sorted(refused) == ["ops-webhook", "pager", "team-slack"]
    assert all(e.startswith(f"OutboundRefused: 127.0.0.1 port {receiver.port} is refused: 127.0.0.1 is a loopback address") for e in refused.values()), refused
    assert receiver.raw == []
    _only(settings, f"127.0.0.1:{receiver.port}")
    deliver_all(now=later + timedelta(hours=2))
    assert receiver.types() == ["call.escalated"] and receiver.bad_signatures == 0
    assert len(receiver.pd) == 1 and len(receiver.slack) == 1


def test_the_receivers_answer_is_kept_short_and_shown_masked(settings, service):
    _only(settings, f"127.0.0.1:{service.port}")
    page = f"<html><body><h1>Account {ACCOUNT} is locked</h1>" + "<p>internal detail</p>" * 400 + "</body></html>"
    service.answers["/operations/k1"] = (503, {"Content-Type": "text/html"}, page.encode())
    policies_load(
        text=f"""
[tools.post_correction]
risk_class       = "irreversible"
strategy         = "reconcile_then_retry"
semantic_fields  = ["tenant", "account", "amount"]
deadline         = "15m"
sensitive_fields = ["account"]
lookup = {{ adapter = "http", url = "{service.url}/operations/{{idempotency_key}}", timeout = "2s" }}
""",
        by="admin",
    )
    (call,) = crashed_run("run-out-3", [("c1", "post_correction", {"tenant": "acme", "account": ACCOUNT, "amount": "1.00"})])
    service.answers[f"/operations/{call.idempotency_key}"] = service.answers.pop("/operations/k1")
    call_reconcile(pk=call.pk)
    (attempt,) = uncertain_call_evidence(pk=call.pk)["attempts"]
    kept = attempt["evidence"]["raw"]
    assert len(kept) <= RAW_LIMIT == 300 and kept.startswith("<html><body><h1>Account") and kept.endswith("…")
    _, secret = token_create(name="dashboard", scopes=["read"])
    r = Client().get(f"/api/uncertain-calls/{call.pk}", HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert r.status_code == 200
    (shown,) = r.json()["attempts"]
    assert shown["evidence"]["raw"].startswith(f"<html><body><h1>Account {MASK} is locked</h1>") and len(shown["evidence"]["raw"]) <= RAW_LIMIT
    assert ACCOUNT not in r.content.decode()


def test_evidence_kept_before_the_limit_is_shown_shortened_after_masking():
    old = {"outcome": "unavailable", "raw": f"account {ACCOUNT} " + "x" * 3900}
    shown = adapters.evidence_shortened(old)
    assert len(shown["raw"]) == RAW_LIMIT and shown["raw"].endswith("…") and old["raw"].startswith(shown["raw"][:-1])
    assert adapters.evidence_shortened({"raw": "short"}) == {"raw": "short"}


def test_an_answer_longer_than_the_limit_is_not_read(settings, service):
    _only(settings, f"127.0.0.1:{service.port}")
    service.answers["/big"] = (200, {"Content-Type": "application/json"}, b'{"a": "' + b"x" * adapters.ANSWER_MAX_BYTES + b'"}')
    ev = adapters.lookup(REF, {"adapter": "http", "url": f"{service.url}/big", "timeout_s": 2.0}, ())
    assert ev.outcome == "unavailable" and "AnswerTooLong: the answer is longer than 1048576 bytes" in ev.error


def test_a_malformed_allowlist_stops_the_settings_naming_the_variable():
    env = {**os.environ, "RECKON_OUTBOUND_ALLOW": "127.0.0.1, http://ledger/"}
    done = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "RECKON_OUTBOUND_ALLOW: 'http://ledger/' is not a host or host:port" in done.stderr


def test_an_allowlist_entry_names_a_host_alone_or_with_its_port(settings):
    _only(settings, "[::1]", "127.0.0.1:8200")
    assert url_check("http://[::1]:9/x") == "http://[::1]:9/x"
    assert url_check("http://127.0.0.1:8200/x") == "http://127.0.0.1:8200/x"
    with pytest.raises(OutboundRefused, match="127.0.0.1 port 8201 is refused"):
        url_check("http://127.0.0.1:8201/x")
    _only(settings)
    with pytest.raises(OutboundRefused, match="::1 is a loopback address"):
        url_check("http://[::1]:9/x")
