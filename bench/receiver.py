"""The load test's receiver: a ledger service on 127.0.0.1 that executes and looks up operations.

    python bench/receiver.py PORT

- ``POST /operations`` with ``Idempotency-Key``: executes the operation. Every request is an
  effect, counted per key: unlike a Stripe-style receiver it does not deduplicate, so a call that
  Reckon (or an agent) executed twice shows as two effects of one key. The answer is the stored
  operation.
- ``GET /operations/<key>``: 200 with the last operation executed under the key, or 404 with
  ``{"final": true}``: the receiver is the authority, and what it never executed never will be
  (the load's agents that die before executing never come back to it).
- ``GET /effects``: ``{key: count}`` for every key executed, for the checks after the run.

Stdlib only, no Django: it stands for a service outside Reckon and runs as its own process.
"""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()
EFFECTS: dict[str, int] = {}
OPERATIONS: dict[str, dict] = {}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out as two writes: no delayed-ACK stall

    def log_message(self, *args):
        pass

    def _answer(self, status: int, doc) -> None:
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        key = self.headers.get("Idempotency-Key") or ""
        if self.path != "/operations" or not key:
            self._answer(400, {"error": "POST /operations with an Idempotency-Key header"})
            return
        try:
            args = json.loads(raw or b"{}")
        except ValueError:
            self._answer(400, {"error": "the body is not JSON"})
            return
        with LOCK:
            EFFECTS[key] = EFFECTS.get(key, 0) + 1
            OPERATIONS[key] = {**args, "operation": f"op-{sum(EFFECTS.values())}", "idempotency_key": key}
            doc = OPERATIONS[key]
        self._answer(200, doc)

    def do_GET(self):
        if self.path == "/effects":
            with LOCK:
                doc = dict(EFFECTS)
            self._answer(200, doc)
        elif self.path.startswith("/operations/"):
            with LOCK:
                doc = OPERATIONS.get(self.path.removeprefix("/operations/"))
            self._answer(200, doc) if doc is not None else self._answer(404, {"final": True, "error": "no such operation"})
        else:
            self._answer(404, {"error": "unknown path"})


def main() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
