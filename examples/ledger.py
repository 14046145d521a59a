"""A small ledger service for the examples (standard library only): balances to read, corrections to
post, and a lookup by idempotency key that Reckon's reconciliation can ask.

    python examples/ledger.py [--port 9000] [--stall | --stall-after N]

- ``GET /balances/<account>``: ``{"account", "balance"}`` (a read; counted in ``reads``);
- ``POST /operations`` with ``Idempotency-Key``: posts the correction once per key, like Stripe: a
  repeat of a key returns the first answer without a second effect;
- ``GET /operations/<key>``: the operation posted with that key, or 404 ``{"final": true}`` (the
  lookup of fixtures/policies.toml's ``post_correction``);
- ``GET /stats``: ``{"reads": N, "effects": {key: count}}``.

``--stall`` makes every POST take effect and then never answer: the agent is left inside its tool,
which is the moment to kill it (Ctrl-C, or SIGKILL) and resume it to see the call become uncertain.
``--stall-after N`` answers the first N POSTs and stalls from the next one on.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Ledger:
    def __init__(self, *, stall_after: int | None = None):
        self.lock = threading.Lock()
        self.stall_after = stall_after  # None: never stall
        self.posts = 0
        self.balances = {"C-771": 12_400, "C-772": 310}
        self.reads = 0
        self.operations: dict[str, dict] = {}
        self.effects: dict[str, int] = {}


def handler(ledger: Ledger):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _answer(self, status: int, doc: dict) -> None:
            body = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            parts = self.path.strip("/").split("/")
            with ledger.lock:
                if parts[0] == "balances" and len(parts) == 2:
                    ledger.reads += 1
                    return self._answer(200, {"account": parts[1], "balance": ledger.balances.get(parts[1], 0)})
                if parts[0] == "operations" and len(parts) == 2:
                    op = ledger.operations.get(parts[1])
                    return self._answer(200, op) if op else self._answer(404, {"final": True, "idempotency_key": parts[1]})
                if parts == ["stats"]:
                    return self._answer(200, {"reads": ledger.reads, "effects": dict(ledger.effects)})
            self._answer(404, {"error": f"no such resource: {self.path}"})

        def do_POST(self):
            if self.path.rstrip("/") != "/operations":
                return self._answer(404, {"error": f"no such resource: {self.path}"})
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                account, amount = body["account"], int(body["amount"])
            except (ValueError, KeyError, TypeError):
                return self._answer(400, {"error": "a correction needs account and amount"})
            key = self.headers.get("Idempotency-Key")
            if not key:
                return self._answer(400, {"error": "Idempotency-Key header is required"})
            with ledger.lock:
                ledger.posts += 1
                stall = ledger.stall_after is not None and ledger.posts > ledger.stall_after
                if key not in ledger.operations:
                    ledger.effects[key] = ledger.effects.get(key, 0) + 1
                    ledger.balances[account] = ledger.balances.get(account, 0) + amount
                    ledger.operations[key] = {**body, "amount": amount, "idempotency_key": key, "operation": f"op-{len(ledger.operations) + 1}"}
                answer = ledger.operations[key]
            while stall:  # the effect is made; the answer never comes
                time.sleep(1)
            self._answer(200, answer)

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=9000)
    stalls = parser.add_mutually_exclusive_group()
    stalls.add_argument("--stall", action="store_true", help="take effect on POST, then never answer")
    stalls.add_argument("--stall-after", type=int, metavar="N", help="answer the first N POSTs, then stall as --stall does")
    opts = parser.parse_args()
    if opts.stall_after is not None and opts.stall_after < 0:
        parser.error(f"--stall-after must be 0 or more, got {opts.stall_after}")
    stall_after = 0 if opts.stall else opts.stall_after
    server = ThreadingHTTPServer(("127.0.0.1", opts.port), handler(Ledger(stall_after=stall_after)))
    server.daemon_threads = True
    print(f"ledger on http://127.0.0.1:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
