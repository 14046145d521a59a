"""The load test's users, run by Locust in its own process (``bench/load.py`` starts it).

Agents append through Reckon's HTTP API with their own append tokens, as ``reckon_client`` does: a
lease, ``run_started``, then model turns whose tool calls are recorded as a start and a completion
in small batches, a renewal now and then, ``run_finished`` and a release. Some of their calls are
corrections and refunds executed on the receiver with the call's idempotency key; now and then an
agent "dies" at such a call (after its start, before or after executing, or executing the wrong
amount) and walks away without a completion or a release, so its lease expires and the call
becomes uncertain, for reconciliation or for a person.

Operators sign in to the console (session and CSRF token, as a browser does) and browse the
overview, the queue, the approval screens, run audits and the decision log, and decide escalated
calls: a refund whose receiver answered "absent" is retried with the same key; a call whose
receiver holds other values (a conflict) is closed as not happened.

Configuration comes from the JSON file named by ``RECKON_LOAD_CONFIG``; when Locust quits, every
acknowledged append (run, seqs, the ``load_id`` of each event), every request's time by route and
the error counts are written to the file it names as ``out``.
"""

from __future__ import annotations

import json
import os
import random
import re
import time
import uuid
from collections import defaultdict
from pathlib import Path

from locust import FastHttpUser, HttpUser, between, events, task

from reckon_client.identity import idempotency_key, signature

CONFIG = json.loads(Path(os.environ["RECKON_LOAD_CONFIG"]).read_text(encoding="utf-8"))

ACKS: list[list] = []  # [run_id, first_seq, last_seq, [load_id per event]] of every 2xx append
TIMES: dict[str, list[float]] = defaultdict(list)  # route -> ms of every request
ERRORS: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))  # route -> {"5xx"|"failure"|"409": n}
COUNTS: dict[str, int] = defaultdict(int)
CALLED: dict[str, int] = defaultdict(int)  # route -> requests, warm-up included
STARTED = time.monotonic()
# The first seconds are not measured: every user signs in or takes its first lease at once, and
# the web workers open their first connections. Errors and the checks count from the start.
WARMUP = float(CONFIG["warmup_s"])


def measured() -> bool:
    return time.monotonic() - STARTED >= WARMUP


@events.request.add_listener
def _record(request_type, name, response_time, response_length, response=None, exception=None, **kw):
    CALLED[name] += 1
    if measured():
        TIMES[name].append(response_time)
    status = getattr(response, "status_code", 0) or 0
    if status >= 500:
        ERRORS[name]["5xx"] += 1
    elif exception is not None:
        ERRORS[name]["failure"] += 1


@events.quitting.add_listener
def _write(environment, **kw):
    doc = {
        "acks": ACKS,
        "times_ms": TIMES,
        "called": dict(CALLED),
        "errors": {k: dict(v) for k, v in ERRORS.items()},
        "counts": dict(COUNTS),
        "elapsed_s": time.monotonic() - STARTED,
        "measured_s": time.monotonic() - STARTED - WARMUP,
    }
    with open(CONFIG["out"], "w", encoding="utf-8") as f:
        json.dump(doc, f)


# --- agents -------------------------------------------------------------------------------------

TOKENS = list(CONFIG["agent_tokens"])
TTL = float(CONFIG["lease_ttl_s"])
DIE = float(CONFIG["die_probability"])


class Agent(FastHttpUser):
    fixed_count = int(CONFIG["agents"])
    wait_time = between(0.1, 0.3)  # a model's turn between tool calls

    def on_start(self):
        self.token = TOKENS.pop()
        self.headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}
        self.name = f"agent-{len(TOKENS)}"
        self.run_id: str | None = None

    # -- the API --

    def _post(self, path: str, body: dict, route: str) -> dict | None:
        with self.client.post(path, data=json.dumps(body), headers=self.headers, name=route, catch_response=True) as resp:
            if resp.status_code in (200, 201, 204):
                resp.success()
                return resp.json() if resp.status_code != 204 else {}
            resp.failure(f"HTTP {resp.status_code}: {(resp.text or '')[:200]}")
            return None

    def _append(self, events: list[tuple[str, dict]]) -> bool:
        ids = [f"{self.run_id}/{self.seq + i + 1}" for i in range(len(events))]
        docs = [{"type": t, "payload": {**p, "load_id": i}} for (t, p), i in zip(events, ids)]
        out = self._post(f"/api/runs/{self.run_id}/events", {"epoch": self.epoch, "expected_seq": self.seq, "events": docs}, "POST /api/runs/[id]/events")
        if out is None:
            self.run_id = None  # the run is in an unknown state: leave it to its lease, as a crashed agent would
            return False
        ACKS.append([self.run_id, out["first_seq"], out["last_seq"], ids])
        COUNTS["events_acked"] += len(events)
        if measured():
            COUNTS["events_measured"] += len(events)
        self.seq = out["last_seq"]
        return True

    def _open(self) -> None:
        self.run_id = f"load-{self.name}-{uuid.uuid4().hex[:10]}"
        lease = self._post(f"/api/runs/{self.run_id}/lease", {"holder": self.name, "ttl_seconds": TTL}, "POST /api/runs/[id]/lease")
        if lease is None:
            self.run_id = None
            return
        self.epoch, self.seq, self.renewed = lease["epoch"], lease["last_seq"], time.monotonic()
        self.steps_left = random.randint(20, 60)
        self.calls = 0
        COUNTS["runs_opened"] += 1
        self._append([("run_started", {"run_id": self.run_id}), ("user_message", {"content": "Reconcile the Q3 ledgers and post the corrections."})])

    def _call(self, tool: str, args: dict) -> tuple[str, dict, dict]:
        self.calls += 1
        cid = f"c{self.calls}"
        sig = signature(tool, args)
        ids = {"idempotency_key": idempotency_key(self.run_id, sig), "signature": sig}
        turn = {"text": f"Calling {tool}.", "tool_calls": [{"id": cid, "name": tool, "arguments": args}], "usage": {"input_tokens": 900, "output_tokens": 60}, "cost_usd": 0.0031}
        return cid, ids, turn

    # -- one step of the agent's loop --

    @task
    def step(self):
        if self.run_id is None:
            self._open()
            return
        if time.monotonic() - self.renewed > TTL / 3:
            if self._post(f"/api/runs/{self.run_id}/lease/renew", {"epoch": self.epoch, "ttl_seconds": TTL}, "POST /api/runs/[id]/lease/renew") is None:
                self.run_id = None
                return
            self.renewed = time.monotonic()
        if self.steps_left <= 0:
            if self._append([("run_finished", {"outcome": "done"})]):
                self._post(f"/api/runs/{self.run_id}/lease/release", {"epoch": self.epoch}, "POST /api/runs/[id]/lease/release")
                COUNTS["runs_finished"] += 1
            self.run_id = None
            return
        self.steps_left -= 1
        if random.random() < 0.12:
            self._correction()
        else:
            self._reads(random.randint(1, 3))

    def _reads(self, n: int) -> None:
        batch = []
        for _ in range(n):
            args = {"tenant": "acme", "account": str(random.randint(4000, 4096)), "period": "2026-Q3", "n": self.calls}
            cid, ids, turn = self._call("read_ledger", args)
            batch += [
                ("model_turn", turn),
                ("tool_call_started", {"call_id": cid, "name": "read_ledger", "arguments": args, **ids}),
                ("tool_call_completed", {"call_id": cid, "name": "read_ledger", "content": {"balance": "1000.00"}, "is_error": False, **ids}),
            ]
        self._append(batch)

    def _correction(self) -> None:
        tool = random.choice(["post_correction", "issue_refund"])
        args = {"tenant": "acme", "account": str(random.randint(4000, 4096)), "amount": f"{random.randint(1, 999)}.00", "currency": "GBP", "ref": f"{self.run_id}:{self.calls}"}
        cid, ids, turn = self._call(tool, args)
        if not self._append([("model_turn", turn), ("tool_call_started", {"call_id": cid, "name": tool, "arguments": args, **ids})]):
            return
        if random.random() < DIE:
            # The agent dies here: after its start, before or after the effect, or having sent the
            # wrong amount. Nobody completes the call or releases the lease.
            fate = random.choice(["before_execute", "after_execute", "wrong_amount"])
            COUNTS[f"died_{fate}"] += 1
            if fate != "before_execute":
                sent = {**args, "amount": f"{float(args['amount']) + 1:.2f}"} if fate == "wrong_amount" else args
                self._execute(sent, ids["idempotency_key"])
            self.run_id = None
            return
        result = self._execute(args, ids["idempotency_key"])
        if result is None:
            self.run_id = None  # an effect of unknown outcome: the call stays uncertain, as it should
            return
        self._append([("tool_call_completed", {"call_id": cid, "name": tool, "content": result, "is_error": False, **ids})])

    def _execute(self, args: dict, key: str) -> dict | None:
        with self.client.post(
            CONFIG["receiver"] + "/operations", data=json.dumps(args), headers={"Idempotency-Key": key, "Content-Type": "application/json"}, name="receiver: POST /operations", catch_response=True
        ) as resp:
            if resp.status_code == 200:
                resp.success()
                COUNTS["agent_executions"] += 1
                return resp.json()
            resp.failure(f"HTTP {resp.status_code}")
            return None


# --- operators ----------------------------------------------------------------------------------

OPERATORS = list(CONFIG["operators"])
CALL_LINK = re.compile(r'href="/calls/(\d+)/"><strong>([^<]+)</strong>')
RUN_LINK = re.compile(r'href="/runs/(load-[^/"]+)/"')
SEEN = re.compile(r'name="seen_version" value="(\d+)"')


class Operator(HttpUser):
    fixed_count = int(CONFIG["operators_count"])
    wait_time = between(0.5, 1.5)  # reading the page

    def on_start(self):
        self.username = OPERATORS.pop()
        self.runs: list[str] = []
        self.client.get("/login/", name="GET /login/")
        token = self.client.cookies.get("csrftoken", "")
        with self.client.post(
            "/login/", data={"username": self.username, "password": CONFIG["password"], "csrfmiddlewaretoken": token}, name="POST /login/", allow_redirects=False, catch_response=True
        ) as resp:
            if resp.status_code != 302:
                resp.failure(f"sign-in answered {resp.status_code}")

    def _page(self, path: str, route: str) -> str:
        with self.client.get(path, name=route, catch_response=True, allow_redirects=False) as resp:
            if resp.status_code != 200:
                resp.failure(f"HTTP {resp.status_code}")
                return ""
            if measured():
                COUNTS["pages_measured"] += 1
            return resp.text

    @task(2)
    def overview(self):
        self._page("/overview/", "GET /overview/")

    @task(3)
    def queue(self):
        html = self._page("/queue/", "GET /queue/")
        self.runs = RUN_LINK.findall(html)[:50] or self.runs

    @task(2)
    def run_audit(self):
        if self.runs:
            self._page(f"/runs/{random.choice(self.runs)}/", "GET /runs/[id]/")
        else:
            html = self._page("/runs/", "GET /runs/")
            self.runs = RUN_LINK.findall(html)[:50]

    @task(1)
    def decision_log(self):
        self._page("/decisions/", "GET /decisions/")

    @task(3)
    def decide(self):
        calls = CALL_LINK.findall(self._page("/queue/?state=escalated", "GET /queue/?state=escalated"))
        if not calls:
            return
        pk, tool = random.choice(calls)
        html = self._page(f"/calls/{pk}/", "GET /calls/[pk]/")
        seen = SEEN.search(html)
        if 'name="decision"' not in html or not seen:
            return  # not decidable (any more): the screen says why
        form = {"csrfmiddlewaretoken": self.client.cookies.get("csrftoken", ""), "seen_version": seen.group(1)}
        absent = 'id="conflict"' not in html and "<strong>absent</strong>" in html
        if tool == "issue_refund" and absent and "has no retry hook" not in html:
            # The receiver's authoritative answer was "never executed": a retry is safe and wanted.
            form |= {"decision": "retry_same_key", "confirm_twice": "on", "reason": "Receiver has no record of this refund: send it once, same key."}
        else:
            form |= {"decision": "not_happened", "reason": "Ledger team reversed the mismatched correction."}
        with self.client.post(f"/calls/{pk}/decide/", data=form, name="POST /calls/[pk]/decide/", allow_redirects=False, catch_response=True) as resp:
            if resp.status_code == 302:
                resp.success()
                COUNTS[f"decided_{form['decision']}"] += 1
            elif resp.status_code == 409:
                resp.success()  # another operator (or reconciliation) acted first: the screen says so
                COUNTS["decide_conflicts"] += 1
            else:
                resp.failure(f"HTTP {resp.status_code}")
