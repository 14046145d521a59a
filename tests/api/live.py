"""Real processes for the API tests: gunicorn serving Reckon on 127.0.0.1 against the test
database, an effect receiver that honours Idempotency-Key, and the environment a child process
needs to reach the same database."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from reckon.env import database_url
from tests.helpers import serve_in_thread

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child_env(**extra: str) -> dict:
    env = dict(os.environ)
    env["DATABASE_URL"] = database_url()
    env.setdefault("RECKON_LOG_LEVEL", "WARNING")
    env.update(extra)
    return env


START_S = 90


class Server:
    """gunicorn running reckon.wsgi on a free port, against the current database."""

    def __init__(self, workers: int = 2, threads: int = 1, *, env: dict | None = None, port: int | None = None, ready: dict | None = None):
        """``env``: extra variables for gunicorn (DEBUG=false and the production ones, say);
        ``ready``: headers for the readiness probe (X-Forwarded-Proto when SSL redirect is on)."""
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [PYTHON, "-m", "gunicorn", "reckon.wsgi:application", "-b", f"127.0.0.1:{self.port}", "-w", str(workers), "--threads", str(threads), "--log-level", "warning"],
            cwd=ROOT,
            env=child_env(**(env or {})),
        )
        # A bound, not a wait: it answers in about a second, but a worker of a loaded machine (xdist on
        # two cores) has been seen to need more than 30 s for gunicorn's start and its first schema.
        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gunicorn exited with {self.proc.returncode}")
            try:
                urllib.request.urlopen(urllib.request.Request(f"{self.url}/api/openapi.json", headers=ready or {}), timeout=1).read()
                return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"gunicorn did not answer within {START_S} s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class EffectReceiver:
    """A receiver of corrections that honours Idempotency-Key like Stripe: the first request with a
    key makes the effect and stores the response; a repeat returns it without a second effect."""

    def __init__(self):
        self.lock = threading.Lock()
        self.effects: dict[str, int] = {}
        self.responses: dict[str, dict] = {}
        self.requests = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                key = self.headers.get("Idempotency-Key") or ""
                with receiver.lock:
                    receiver.requests += 1
                    if key not in receiver.responses:
                        receiver.effects[key] = receiver.effects.get(key, 0) + 1
                        receiver.responses[key] = {"operation": f"op-{len(receiver.responses) + 1}", "account": body.get("account"), "amount": body.get("amount")}
                    out = json.dumps(receiver.responses[key]).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/corrections"
        self.thread = serve_in_thread(self.server)

    @property
    def total_effects(self) -> int:
        return sum(self.effects.values())

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
