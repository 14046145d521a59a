"""What the API tests (and the tests of other packages that call the API) share: a tiny JSON client
over Django's test client, the first append of a run, reading /metrics, a fresh throttle window and
address, and the masking tests' sensitive run. The processes they start are in live.py."""

from __future__ import annotations

import json
import time
import uuid

from django.test import Client
from prometheus_client.parser import text_string_to_metric_families


class Api:
    """A tiny JSON client over Django's test client, with a token or a session."""

    def __init__(self, client: Client, secret: str | None = None):
        self.client = client
        self.headers = {"HTTP_AUTHORIZATION": f"Bearer {secret}"} if secret else {}

    def get(self, path, **params):
        return self.client.get(path, params, **self.headers)

    def post(self, path, body=None, **headers):
        return self.client.post(path, json.dumps(body if body is not None else {}), content_type="application/json", **self.headers, **headers)


def _start(api, run_id="run-api-1", holder="agent-1"):
    lease = api.post(f"/api/runs/{run_id}/lease", {"holder": holder}).json()
    r = api.post(f"/api/runs/{run_id}/events", {"epoch": lease["epoch"], "expected_seq": 0, "events": [{"type": "run_started", "payload": {"run_id": run_id}}]})
    assert r.status_code == 201, r.content
    return lease


def _samples(text: str) -> dict:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _address() -> str:
    n = uuid.uuid4().int
    return f"10.{n % 250}.{(n >> 8) % 250}.{(n >> 16) % 250 + 1}"


def _fresh_window(window_s: int) -> None:
    """Start a test early in a window, so the window cannot end (and the counts reset) mid-test."""
    left = window_s - time.time() % window_s
    if left < 5:
        time.sleep(left + 0.05)


# The masking tests' sensitive account: post_correction's policy marks ``account`` sensitive.
SECRET = "GB29NWBK60161331926819"
ARGS = {"tenant": "acme", "account": SECRET, "amount": 840}


def _bodies(api: Api, run_id: str) -> dict[str, str]:
    calls = api.get("/api/uncertain-calls", state="all").json()["calls"]
    assert calls, "the second call should be in the queue"
    paths = [
        f"/api/runs/{run_id}/events",
        f"/api/runs/{run_id}/state",
        f"/api/runs/{run_id}/state?at=3",
        "/api/uncertain-calls?state=all",
        *[f"/api/uncertain-calls/{c['id']}" for c in calls],
    ]
    out = {}
    for path in paths:
        r = api.client.get(path, **api.headers)
        assert r.status_code == 200, (path, r.content[:300])
        out[path] = r.content.decode()
    return out
