"""The examples' side effects: calls to the ledger service of examples/ledger.py (``LEDGER_URL``,
default http://127.0.0.1:9000). Standard library only."""

from __future__ import annotations

import json
import os
import urllib.request


class Ledger:
    def __init__(self, url: str | None = None):
        self.url = (url or os.environ.get("LEDGER_URL") or "http://127.0.0.1:9000").rstrip("/")

    def _send(self, req: urllib.request.Request) -> dict:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read())

    def balance(self, account: str) -> dict:
        """A read: the account's balance now."""
        return self._send(urllib.request.Request(f"{self.url}/balances/{account}"))

    def post(self, account: str, amount: int, *, idempotency_key: str) -> dict:
        """The side effect: a correction, posted once per idempotency key."""
        body = json.dumps({"account": account, "amount": amount}).encode()
        headers = {"Content-Type": "application/json", "Idempotency-Key": idempotency_key}
        return self._send(urllib.request.Request(f"{self.url}/operations", data=body, headers=headers, method="POST"))


ledger = Ledger()
