"""Pins the http adapter's execute/retry status mapping (docs/formats.md, "The `http` adapter"): 2xx is done;
a 4xx other than 409 and 429 is a proven failure; 409, 429, 5xx, a timeout and a refused connection
leave the call UNCERTAIN. "It did not happen" is never recorded for a request the receiver may have
accepted. Against a real HTTP server on 127.0.0.1 that answers each status, a handler that answers
after the client's timeout, and a port nobody listens on."""

from __future__ import annotations

import json
import socket
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from recovery import adapters
from recovery.adapters import CallRef
from recovery.models import UncertainCall
from recovery.policy_changes import policies_load
from recovery.reconcile import call_reconcile
from runs.selectors import run_state
from runs.store import events_read
from tests.helpers import serve_in_thread
from tests.recovery.helpers import correction, crashed_run

S = UncertainCall.State

DONE = [200, 201, 202, 204]
FAILED = [400, 401, 403, 404, 405, 410, 422]
UNCERTAIN = [409, 429, 500, 502, 503, 504, "timeout", "refused"]
CASES = [(s, "done") for s in DONE] + [(s, "failed") for s in FAILED] + [(s, "uncertain") for s in UNCERTAIN]


class StatusReceiver:
    """POST /status/<code> answers <code>; POST /slow answers 201 after the client gave up. Every
    request is counted on arrival: the receiver got it, whatever it answered."""

    def __init__(self):
        self.received: list[str] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                receiver.received.append(self.path)
                if self.path == "/slow":
                    time.sleep(1.2)
                    code = 201
                else:
                    code = int(self.path.rsplit("/", 1)[-1])
                data = b"" if code == 204 else json.dumps({"status": code, "key": self.headers.get("Idempotency-Key")}).encode()
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True  # /slow: the client gave up before the answer

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        serve_in_thread(self.server)

    def target(self, status) -> str:
        if status == "timeout":
            return f"{self.url}/slow"
        if status == "refused":
            with socket.socket() as s:  # a port that was free a moment ago and has no listener
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            return f"http://127.0.0.1:{port}/operations"
        return f"{self.url}/status/{status}"


@pytest.fixture(scope="module")
def receiver():
    r = StatusReceiver()
    yield r
    r.server.shutdown()
    r.server.server_close()


SPEC_TIMEOUT = 0.3


@pytest.mark.parametrize("status, expected", CASES, ids=[str(s) for s, _ in CASES])
def test_it_maps_the_receivers_answer_to_done_failed_or_uncertain(receiver, status, expected):
    ref = CallRef("run-pin-http", "c1", "key-http-1", "post_correction", correction(), 2)
    before = len(receiver.received)

    result = adapters.execute(ref, {"adapter": "http", "url": receiver.target(status), "method": "POST", "timeout_s": SPEC_TIMEOUT})

    assert result.outcome == expected, (status, result)
    if status != "refused":
        assert len(receiver.received) == before + 1, "the request reached the receiver"
    if expected == "uncertain":
        assert result.error, "an uncertain outcome says why"
    if isinstance(status, int):
        assert result.status == status


def _policy(url: str) -> str:
    return f"""
[tools.post_correction]
risk_class      = "irreversible"
strategy        = "provider_idempotency"
semantic_fields = ["tenant", "account", "amount", "currency", "period"]
deadline        = "15m"
key_retention   = "24h"
execute = {{ adapter = "http", url = "{url}", method = "POST", timeout = "{int(SPEC_TIMEOUT * 1000)}ms" }}
"""


@pytest.mark.django_db
@pytest.mark.parametrize("status, expected", CASES, ids=[str(s) for s, _ in CASES])
def test_it_records_a_retry_as_done_not_happened_or_still_uncertain_by_the_same_mapping(receiver, status, expected):
    policies_load(text=_policy(receiver.target(status)), by="dana.oncall")
    run_id = f"run-pin-retry-{status}"
    (call,) = crashed_run(run_id, [("c1", "post_correction", correction())])
    key = call.idempotency_key

    result = call_reconcile(pk=call.pk)

    assert result.action == "retry"
    after = [e for e in events_read(run_id=run_id) if e.seq > call.uncertain_seq]
    assert [e.type for e in after[:2]] == ["reconciliation_attempted", "tool_call_started"]
    assert after[1].payload["retry_of"] == call.start_seq
    call.refresh_from_db()
    state = run_state(run_id=run_id)
    if expected == "done":
        assert [e.type for e in after[2:]] == ["tool_call_completed", "tool_call_resolved"]
        assert (after[2].payload["is_error"], after[2].payload["idempotency_key"]) == (False, key)
        assert (call.state, call.disposition) == (S.RESOLVED, "retried")
        assert key in state.completed_calls
    elif expected == "failed":
        assert [e.type for e in after[2:]] == ["tool_call_completed", "tool_call_resolved"]
        assert (after[2].payload["is_error"], after[2].payload["idempotency_key"]) == (True, None)
        assert (call.state, call.disposition) == (S.RESOLVED, "not_happened")
        assert key not in state.completed_calls  # a proven failure occupies no key
    else:
        assert [e.type for e in after[2:]] == ["reconciliation_attempted"], "nothing may settle a call whose retry's outcome is unknown"
        retry = after[2].payload
        assert (retry["phase"], retry["outcome"], retry["action"]) == ("retry", "unavailable", "backoff")
        assert retry["next_attempt_in_s"] is not None
        assert not [e for e in after if e.type == "tool_call_resolved"], "no disposition, least of all not_happened"
        assert not [e for e in after if e.type == "tool_call_completed"]
        assert call.state == S.RECONCILING and call.disposition == "" and call.next_attempt_at is not None
        assert key not in state.completed_calls
        assert key in {c.idempotency_key for c in state.uncertain_calls}
