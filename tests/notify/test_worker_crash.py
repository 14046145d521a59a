"""A Celery worker SIGKILLed in the middle of deliveries, then restarted: every notification is
delivered, and the receiver never sees two different webhook-ids for one notification.

Real processes on real Redis: ``celery -A reckon worker`` (acks_late, a thread pool so several
deliveries are in flight at once) against the test database, and a receiver on 127.0.0.1 that
verifies every Standard Webhooks signature, counts each webhook-id, and holds the first requests
without answering, so the worker is killed after the receiver has the message and before the
worker can record it: the case where a retry reaches a receiver that already has it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from notify.config import notifications_load
from notify.models import Notification
from notify.tasks import notification_deliver, notifications_tick
from tests.api.live import ROOT, child_env
from tests.helpers import serve_in_thread
from tests.notify.helpers import SECRET, escalated

pytestmark = [pytest.mark.broker, pytest.mark.django_db(transaction=True)]

HELD = 4  # the worker's thread pool: this many deliveries in flight when it is killed


class HoldingReceiver:
    """Verifies signatures, counts per webhook-id, and keeps what each logical notification (receiver path, type,
    run, call, level) was sent as. The first ``hold`` requests are read and counted, then held
    unanswered until ``release`` is set."""

    def __init__(self, hold: int):
        self.by_id: dict[str, int] = {}
        self.ids_of: dict[tuple, set[str]] = {}
        self.bad_signatures = 0
        self.held = 0
        self.hold = hold
        self.release = threading.Event()
        self.lock = threading.Lock()
        from standardwebhooks.webhooks import Webhook, WebhookVerificationError

        rec = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                data = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                try:
                    Webhook(SECRET).verify(data, {k: self.headers[k] for k in ("webhook-id", "webhook-timestamp", "webhook-signature")})
                except (WebhookVerificationError, KeyError):
                    with rec.lock:
                        rec.bad_signatures += 1
                    self._answer(400)
                    return
                body = json.loads(data)
                d = body["data"]
                wid = self.headers["webhook-id"]
                with rec.lock:
                    rec.by_id[wid] = rec.by_id.get(wid, 0) + 1
                    rec.ids_of.setdefault((self.path, body["type"], d["run_id"], d["call_id"], d.get("level")), set()).add(wid)
                    holding = rec.held < rec.hold
                    rec.held += holding
                if holding:
                    rec.release.wait(30)  # accepted, but the answer comes too late for a killed worker
                self._answer(200)

            def _answer(self, status):
                try:
                    self.send_response(status)
                    self.send_header("Content-Length", "2")
                    self.end_headers()
                    self.wfile.write(b"ok")
                except OSError:
                    pass  # the worker that asked is dead

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        serve_in_thread(self.server)


def _worker(queue: str) -> subprocess.Popen:
    """``celery -A reckon worker`` on a queue of its own (its retries and the tick's sweep go there
    too), short HTTP timeout and lock so the sweep may take over a killed worker's rows soon."""
    env = child_env(CELERY_DEFAULT_QUEUE=queue, RECKON_NOTIFY_TIMEOUT_S="5", RECKON_NOTIFY_LOCK_S="8", RECKON_NOTIFY_BACKOFF_S="0")
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "reckon", "worker", "-Q", queue, "-P", "threads", "-c", str(HELD),
         "--without-heartbeat", "--without-mingle", "--without-gossip", "--loglevel", "WARNING"],
        cwd=ROOT,
        env=env,
    )


def _queue_forget(queue: str) -> None:
    """Drop the test's queue and the killed worker's unacknowledged messages from Redis (kombu keeps
    them in ``unacked`` to restore after the visibility timeout), so no later worker finds them."""
    import redis
    from django.conf import settings

    r = redis.Redis.from_url(settings.REDIS_URL)
    r.delete(queue, *r.scan_iter(f"_kombu.binding*{queue}"))
    for tag, raw in r.hscan_iter("unacked"):
        if json.loads(raw)[2] == queue:
            r.hdel("unacked", tag)
            r.zrem("unacked_index", tag)


def _wait(what, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if what():
            return True
        time.sleep(0.1)
    return False


def test_a_worker_killed_mid_delivery_loses_nothing_and_sends_one_id_per_notification(policies, settings):
    receiver = HoldingReceiver(hold=HELD)
    settings.RECKON_NOTIFY_DELIVER_ON_COMMIT = False  # handed to this test's queue below instead
    notifications_load(
        text=f'[channels.ops-webhook]\nkind = "webhook"\nurl = "{receiver.url}/hooks"\nsecret = "{SECRET}"\n'
        f'[channels.audit-webhook]\nkind = "webhook"\nurl = "{receiver.url}/audit"\nsecret = "{SECRET}"\n'
        '[[routes]]\nlevels = [{ notify = ["ops-webhook", "audit-webhook"], after = "0m" }]\n',
        by="admin",
    )
    for i in range(6):
        escalated(f"run-kill-{i}")
    rows = list(Notification.objects.values_list("id", "delivery_id"))
    assert len(rows) == 12
    queue = f"test-notify-{uuid.uuid4().hex[:12]}"
    first = _worker(queue)
    second = None
    try:
        for pk, _ in rows:
            notification_deliver.apply_async((pk,), queue=queue)
        assert _wait(lambda: receiver.held == HELD, 60), f"the worker sent {receiver.held} of {HELD} deliveries"
        os.kill(first.pid, signal.SIGKILL)
        assert first.wait(10) == -signal.SIGKILL
        receiver.release.set()
        # The killed worker's deliveries reached the receiver but were never recorded.
        unrecorded = Notification.objects.filter(state="pending", attempts=0, locked_until__isnull=False).count()
        assert unrecorded == HELD

        second = _worker(queue)

        def all_delivered() -> bool:
            notifications_tick.apply_async(queue=queue)  # beat's sweep, run by the worker
            return _wait(lambda: not Notification.objects.exclude(state="delivered").exists(), 1.0)

        assert _wait(all_delivered, 90), list(Notification.objects.exclude(state="delivered").values("id", "state", "attempts", "last_error"))
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        receiver.release.set()
        receiver.server.shutdown()
        receiver.server.server_close()
        _queue_forget(queue)

    assert receiver.bad_signatures == 0
    assert set(receiver.by_id) == {d for _, d in rows}  # every notification arrived
    assert len(receiver.ids_of) == len(rows) and all(len(ids) == 1 for ids in receiver.ids_of.values())
    # The held ones arrived twice under their one id: the receiver can tell it already has them.
    assert sorted(receiver.by_id.values()) == [1] * (len(rows) - HELD) + [2] * HELD
