"""What the notification tests (and recovery's outbound tests) share: the receivers' classes (an HTTP
server that verifies Standard Webhooks signatures and counts deliveries per webhook-id, and takes
PagerDuty and Slack posts; a mailbox for aiosmtpd that keeps every message's raw bytes), the
channels and routes they are sent to, and what the workers do. The fixtures are in conftest.py."""

from __future__ import annotations

import json
import socket
import threading
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from django.utils import timezone as djtz
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from notify.delivery import notification_deliver, notifications_due
from notify.escalation import escalations_tick
from recovery.models import UncertainCall
from recovery.reconcile import call_reconcile
from tests.helpers import serve_in_thread
from tests.recovery.helpers import crashed_run

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


class Receiver:
    """``/hooks``: a webhook receiver that verifies every signature; ``/pd`` and ``/slack`` keep
    what they are sent. ``script`` is a list of status codes answered in turn before 200; while
    ``hold`` is an unset event, every request is recorded and then left unanswered until it is set
    (at most 10 s), so a test can keep a delivery in flight."""

    def __init__(self):
        self.by_id: dict[str, int] = {}
        self.bodies: list[dict] = []
        self.raw: list[bytes] = []
        self.pd: list[dict] = []
        self.slack: list[dict] = []
        self.bad_signatures = 0
        self.script: list[int] = []
        self.hold: threading.Event | None = None
        self.lock = threading.Lock()
        rec = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                data = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with rec.lock:
                    rec.raw.append(data)
                    status = rec.script.pop(0) if rec.script else 200
                    if self.path == "/hooks":
                        try:
                            Webhook(SECRET).verify(data, {k: self.headers[k] for k in ("webhook-id", "webhook-timestamp", "webhook-signature")})
                        except (WebhookVerificationError, KeyError):
                            rec.bad_signatures += 1
                            status = 400
                        if status == 200:
                            wid = self.headers["webhook-id"]
                            rec.by_id[wid] = rec.by_id.get(wid, 0) + 1
                            if rec.by_id[wid] == 1:
                                rec.bodies.append(json.loads(data))
                        rec.attempt_ids = getattr(rec, "attempt_ids", []) + [self.headers.get("webhook-id")]
                    elif self.path == "/pd" and status == 200:
                        rec.pd.append(json.loads(data))
                    elif self.path == "/slack" and status == 200:
                        rec.slack.append(json.loads(data))
                if rec.hold is not None:
                    rec.hold.wait(10)
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        serve_in_thread(self.server)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def types(self) -> list[str]:
        return [b["type"] for b in self.bodies]


class Mailbox:
    def __init__(self):
        self.messages: list[bytes] = []

    async def handle_DATA(self, server, session, envelope):
        self.messages.append(envelope.original_content or envelope.content)
        return "250 OK"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def config_text(url: str, *, repeat: str | None = '"1h"', extra: str = "") -> str:
    return f"""
[channels.ops-webhook]
kind   = "webhook"
url    = "{url}/hooks"
secret = "{SECRET}"

[channels.oncall-mail]
kind = "email"
to   = ["oncall@example.com"]

[channels.pager]
kind        = "pagerduty"
url         = "{url}/pd"
routing_key = "R0UT1NGKEY"

[channels.team-slack]
kind = "slack"
url  = "{url}/slack"

[[routes]]
risk_class = ["irreversible"]
levels = [
  {{ notify = ["ops-webhook", "oncall-mail"], after = "0m" }},
  {{ notify = ["pager", "team-slack"], after = "15m" }},
]
{"repeat = " + repeat if repeat else ""}
digest = {{ notify = ["oncall-mail", "ops-webhook"], at = "08:00", timezone = "Europe/London" }}
{extra}
"""


def deliver_all(now: datetime | None = None) -> int:
    """What the workers do: deliver every due notification, until none is due."""
    n = 0
    for _ in range(20):
        due = notifications_due(now=now)
        if not due:
            break
        for pk in due:
            notification_deliver(notification_id=pk, now=now)
            n += 1
    return n


def escalated(run_id: str, args: dict | None = None) -> UncertainCall:
    args = args or {"tenant": "initech", "notice": "NTC-22", "recipient": "fca"}
    (call,) = crashed_run(run_id, [("call_n2", "notify_regulator", args)])
    call_reconcile(pk=call.pk)
    call.refresh_from_db()
    assert call.state == UncertainCall.State.ESCALATED
    return call


def tick(at: datetime) -> list[int]:
    return escalations_tick(now=at)


def now() -> datetime:
    return djtz.now()
