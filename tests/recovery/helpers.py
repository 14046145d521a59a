"""What the recovery tests (and the notification, API and console tests that build on them) share: a
real ledger service on 127.0.0.1 with effect counters (the ``ledger`` and ``policies`` fixtures of
tests/conftest.py serve it), its tool policies, runs with a start their writer never completed, and
the projection's rows as plain values."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from recovery.detection import uncertain_calls_detect
from recovery.models import UncertainCall
from runs.leases import lease_acquire, lease_release
from runs.store import NewEvent, events_append
from runs.synthetic import calls_started
from tests.helpers import serve_in_thread


class Ledger:
    """A receiver that keeps operations by idempotency key, as a Stripe-style API does.

    ``effects[key]`` counts operations actually created: the number that must never exceed one.
    ``modes[key]`` makes a lookup answer "unavailable" (503), "timeout" (sleeps past the client's
    timeout), "not_final" (a 404 that is not authoritative) or "garbage" (not JSON).
    ``canned[key] = (status, content_type, body)`` answers a lookup with exactly those bytes.
    """

    def __init__(self):
        self.ops: dict[str, dict] = {}
        self.effects: dict[str, int] = {}
        self.executes: dict[str, int] = {}
        self.lookups: dict[str, int] = {}
        self.modes: dict[str, str] = {}
        self.canned: dict[str, tuple[int, str, bytes]] = {}
        self.lock = threading.Lock()
        ledger = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, *args):
                pass

            def _send(self, status, body, content_type="application/json"):
                data = json.dumps(body).encode() if not isinstance(body, bytes) else body
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                key = self.path.rsplit("/", 1)[-1]
                with ledger.lock:
                    ledger.lookups[key] = ledger.lookups.get(key, 0) + 1
                    mode = ledger.modes.get(key)
                    op = ledger.ops.get(key)
                    canned = ledger.canned.get(key)
                if canned is not None:
                    status, content_type, body = canned
                    return self._send(status, body, content_type)
                if mode == "unavailable":
                    return self._send(503, {"error": "ledger maintenance"})
                if mode == "timeout":
                    import time

                    time.sleep(0.8)
                    return self._send(200, {})
                if mode == "not_final":
                    return self._send(404, {"error": "not found"})
                if mode == "garbage":
                    return self._send(200, b"<html>oops</html>")
                if op is None:
                    return self._send(404, {"final": True, "detail": "no operation with this key, and none can commit later"})
                return self._send(200, op)

            def do_POST(self):
                key = self.headers.get("Idempotency-Key", "")
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"null")
                with ledger.lock:
                    ledger.executes[key] = ledger.executes.get(key, 0) + 1
                    if not key:
                        return self._send(400, {"error": "Idempotency-Key required"})
                    if key not in ledger.ops:
                        ledger.ops[key] = dict(body, id=f"OP-{len(ledger.ops) + 1}")
                        ledger.effects[key] = ledger.effects.get(key, 0) + 1
                    op = ledger.ops[key]
                return self._send(201, op)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = serve_in_thread(self.server)

    def seed(self, key: str, fields: dict) -> None:
        """An operation the original call committed before its worker died."""
        with self.lock:
            self.ops[key] = dict(fields, id=f"OP-{len(self.ops) + 1}")
            self.effects[key] = self.effects.get(key, 0) + 1

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def policies_text(url: str, *, extra: str = "") -> str:
    return f"""
[tools.post_correction]
risk_class      = "irreversible"
strategy        = "reconcile_then_retry"
semantic_fields = ["tenant", "account", "amount", "currency", "period"]
deadline        = "15m"
key_retention   = "24h"
lookup  = {{ adapter = "http", url = "{url}/operations/{{idempotency_key}}", timeout = "400ms" }}
execute = {{ adapter = "http", url = "{url}/operations", method = "POST" }}

[tools.notify_regulator]
risk_class      = "irreversible"
strategy        = "escalate"
semantic_fields = ["tenant", "notice", "recipient"]
deadline        = "10m"
lookup  = {{ adapter = "http", url = "{url}/operations/{{idempotency_key}}", timeout = "400ms" }}

[tools.read_ledger]
risk_class = "read_only"
strategy   = "reconcile_then_retry"
deadline   = "1h"
{extra}
"""


def correction(ref: str = "C-771", amount: str = "840.00", account: str = "4020") -> dict:
    return {"tenant": "acme", "account": account, "amount": amount, "currency": "GBP", "period": "2026-Q3", "reference": ref}


def crashed_run(run_id: str, calls: list[tuple[str, str, dict]], *, completed: int = 0, ts=None) -> list[UncertainCall]:
    """A run whose agent started ``calls`` (call_id, tool, arguments), completed the first
    ``completed`` of them, then died: its lease is released, so nobody owns the run any more."""
    lease = calls_started(run_id, calls, holder="agent-7:worker-a", completed=completed, ts=ts)
    lease_release(run_id=run_id, epoch=lease.epoch)
    uncertain_calls_detect(run_id=run_id)
    return list(UncertainCall.objects.filter(run_id=run_id).order_by("start_seq"))


def types_after(run_id: str, seq: int) -> list[str]:
    from runs.store import events_read

    return [e.type for e in events_read(run_id=run_id, after=seq)]


S = UncertainCall.State
RISKS = ("read_only", "idempotent", "reversible", "irreversible")


# Concurrency tokens, not facts (see recovery/projection.py).
_TOKENS = {"id", "updated_at"}


def snapshot() -> list[dict]:
    fields = [f.attname for f in UncertainCall._meta.concrete_fields if f.attname not in _TOKENS]
    return [dict(zip(fields, row)) for row in UncertainCall.objects.order_by("run_id", "start_seq").values_list(*fields)]


def _uncertain_call(run_id: str, tenant: str) -> UncertainCall:
    """A run whose agent started a correction and gave its lease up without completing it."""
    lease = lease_acquire(run_id=run_id, holder="agent")
    args = {"tenant": tenant, "account": "C-771", "amount": 840}
    events_append(
        run_id=run_id,
        epoch=lease.epoch,
        expected_seq=0,
        events=[NewEvent("run_started", {"run_id": run_id}), NewEvent("tool_call_started", {"call_id": "c1", "name": "post_correction", "arguments": args})],
    )
    lease_release(run_id=run_id, epoch=lease.epoch)
    uncertain_calls_detect(run_id=run_id)
    return UncertainCall.objects.get(run_id=run_id)
