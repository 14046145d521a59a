"""An append whose answer was lost: the HTTP client sends it again, the repeat is refused as a seq
conflict, and the client reads the log back to recognise its own events.

A proxy on 127.0.0.1 between the client and gunicorn forwards the first append of an event, takes
the server's answer, and closes the client's connection without passing it on: the first copy
landed and only its acknowledgement is gone. The client must carry on with exactly one copy in the
log. When the event at that seq is not the client's (the request never reached the server and the
same epoch's other writer took the seq), the conflict stays a conflict.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import pytest
from django.db import connections
from reckon_client import HttpTransport, SeqConflict, open_run

from access.tokens import token_create
from runs.store import events_read
from tests.helpers import serve_in_thread

pytestmark = pytest.mark.django_db(transaction=True)


class LosingProxy:
    """Forwards HTTP requests to ``upstream``; the first POST whose body contains ``marker`` is
    handled by ``on_lost`` instead of being answered: by default forwarded and its answer dropped."""

    def __init__(self, upstream: str, marker: bytes, *, forward: bool = True, before_drop: Callable[[], None] | None = None):
        up = urlsplit(upstream)
        self.lost = 0
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _relay(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                lose = self.command == "POST" and marker in body and proxy.lost == 0
                if lose:
                    proxy.lost += 1
                conn = http.client.HTTPConnection(up.hostname, up.port, timeout=10)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                if not lose or forward:
                    conn.request(self.command, self.path, body=body or None, headers=headers)
                    resp = conn.getresponse()
                    data = resp.read()
                if lose:
                    conn.close()
                    if before_drop is not None:
                        before_drop()
                    # The answer never reaches the client: its connection just closes.
                    self.close_connection = True
                    return
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in ("connection", "transfer-encoding", "content-length"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                conn.close()

            do_GET = do_POST = _relay

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        serve_in_thread(self.httpd)

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def token(db):
    return token_create(name="resend agent", scopes=["append", "read"])[1]


def test_a_retried_append_whose_first_copy_landed_is_taken_as_acknowledged(server, token):
    run_id = "run-resend-ok"
    proxy = LosingProxy(server.url, b'"the answer to this is lost"')
    try:
        with HttpTransport(f"{proxy.url}/api", token) as transport:
            run = open_run(run_id, transport=transport, holder="agent-a", renew=False)
            ev = run.append("user_message", content="the answer to this is lost")
            after = run.append("user_message", content="and the run goes on")
            run.close(release=True)
    finally:
        proxy.stop()
    assert proxy.lost == 1, "the proxy dropped the first answer"
    assert (ev.seq, after.seq) == (2, 3)
    stored = [(e.type, e.payload.get("content")) for e in events_read(run_id=run_id)]
    assert stored == [("run_started", None), ("user_message", "the answer to this is lost"), ("user_message", "and the run goes on")]


def test_a_lost_answer_to_the_first_append_still_gives_the_client_the_runs_key_secret(server, token):
    run_id = "run-resend-start"
    proxy = LosingProxy(server.url, b'"run_started"')
    try:
        with HttpTransport(f"{proxy.url}/api", token) as transport:
            run = open_run(run_id, transport=transport, holder="agent-a", renew=False)
            run.close(release=True)
    finally:
        proxy.stop()
    assert proxy.lost == 1
    first = events_read(run_id=run_id)[0]
    assert run.state.key_secret == first.payload["key_secret"] and len(events_read(run_id=run_id)) == 1


def test_a_different_event_at_that_seq_stays_a_conflict(server, token):
    from runs.store import NewEvent, events_append

    run_id = "run-resend-other"
    holder = {}

    def someone_else_takes_the_seq():
        # The request never reached the server; the same epoch's other writer appended at seq 2.
        try:
            events_append(run_id=run_id, epoch=holder["run"].epoch, expected_seq=1, events=[NewEvent("user_message", {"content": "not the client's"})])
        finally:
            connections.close_all()  # the proxy's handler thread's own database connection

    proxy = LosingProxy(server.url, b'"mine"', forward=False, before_drop=someone_else_takes_the_seq)
    try:
        with HttpTransport(f"{proxy.url}/api", token) as transport:
            run = holder["run"] = open_run(run_id, transport=transport, holder="agent-a", renew=False)
            with pytest.raises(SeqConflict):
                run.append("user_message", content="mine")
            run.close(release=True)
    finally:
        proxy.stop()
    assert [e.payload.get("content") for e in events_read(run_id=run_id)] == [None, "not the client's"]


def test_without_a_resend_a_seq_conflict_is_not_read_back(server, token):
    """A conflict on the first send is the caller's own mistake (a stale seq): reported at once."""
    run_id = "run-resend-none"
    transport = HttpTransport(f"{server.url}/api", token)
    run = open_run(run_id, transport=transport, holder="agent-a", renew=False)
    run.append("user_message", content="one")
    with pytest.raises(SeqConflict):
        transport.append(run_id, run.epoch, 1, [{"type": "user_message", "payload": {"content": "one"}}])
    run.close(release=True)
    transport.close()
    assert json.dumps([e.payload.get("content") for e in events_read(run_id=run_id)]) == '[null, "one"]'
