"""A scripted agent that uses the agent client (reckon_client) against a side-effecting tool.

The "model" is a script that reads the folded state, so a resumed process continues exactly where
the log says the run is: before its first model turn, with a tool call asked for but unanswered, or
done. The tool posts a ledger correction, either into a counter file (one line per effect) or to an
HTTP receiver with the ``Idempotency-Key`` header.

For crash tests the agent can pause at three points (docs/api.md, the demo agent), named by
``RECKON_FAULT_AT`` (runs.faults): ``model_call`` (while the model is "thinking"), ``tool_execution`` (the start
is recorded, the effect not yet made) and ``after_effect`` (the effect is made, its completion not yet
recorded). On reaching it the agent says so and waits until the test kills it.
"""

from __future__ import annotations

import json
import os
import urllib.request
import uuid
from typing import Any

from reckon_client import CallUncertain, Run, ToolCall, ToolFailed, open_run
from runs.faults import fault_point

PAUSE_POINTS = ("model_call", "tool_execution", "after_effect")

CORRECTION = {"tenant": "acme", "account": "C-771", "amount": 840, "currency": "EUR", "period": "2026-Q3"}


def file_tool(path: str):
    """A side effect the test can count: one line per correction actually posted."""

    def post_correction(arguments: dict, *, idempotency_key: str) -> Any:
        fault_point("tool_execution")
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"key": idempotency_key, **arguments}) + "\n")
            f.flush()
            os.fsync(f.fileno())
        fault_point("after_effect")
        return {"posted": True, "account": arguments["account"], "amount": arguments["amount"]}

    return post_correction


def http_tool(url: str, timeout: float = 5.0):
    """POST the correction with the key as ``Idempotency-Key``; a 4xx other than 409/429 is a proven failure."""

    def post_correction(arguments: dict, *, idempotency_key: str) -> Any:
        fault_point("tool_execution")
        req = urllib.request.Request(
            url, data=json.dumps(arguments).encode(), method="POST", headers={"Content-Type": "application/json", "Idempotency-Key": idempotency_key}
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                body = json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            if 400 <= exc.code < 500 and exc.code not in (409, 429):
                raise ToolFailed(f"receiver refused the correction: HTTP {exc.code}") from None
            raise  # 5xx, 409, 429: the outcome is unknown
        fault_point("after_effect")
        return body

    return post_correction


def _unanswered_calls(run: Run) -> list[dict]:
    """Tool calls of the last model turn that have no tool message yet."""
    msgs = run.state.messages
    for i in range(len(msgs) - 1, -1, -1):
        if msgs[i].role == "assistant":
            answered = {m.call_id for m in msgs[i + 1 :] if m.role == "tool"}
            return [c for c in (msgs[i].tool_calls or []) if c["id"] not in answered]
    return []


def scripted_model(run: Run) -> dict:
    """The next model turn, decided by the folded state alone (so a resumed run gets the same one)."""
    fault_point("model_call")
    if not any(m.role == "tool" for m in run.state.messages):
        call = {"id": f"call-{uuid.uuid4().hex[:8]}", "name": "post_correction", "arguments": CORRECTION}
        return {"text": "Posting the Q3 correction.", "tool_calls": [call], "usage": {"input_tokens": 120, "output_tokens": 30}, "cost_usd": 0.001}
    return {"text": "The correction is posted.", "tool_calls": [], "usage": {"input_tokens": 160, "output_tokens": 12}, "cost_usd": 0.001}


def agent_run(*, run: Run, tool, retry_uncertain: bool = False) -> dict:
    """Drive the run to its end. Returns a summary; an uncertain call stops the run for recovery."""
    try:
        while run.state.status != "finished":
            if not any(m.role == "user" for m in run.state.messages):
                run.append("user_message", content="Post the Q3 corrections for account C-771.")
                continue
            pending = _unanswered_calls(run)
            if pending:
                for c in pending:
                    run.invoke(ToolCall(c["id"], c["name"], c["arguments"]), tool, retry_uncertain=retry_uncertain)
                continue
            last = run.state.messages[-1]
            if last.role == "assistant" and not last.tool_calls:
                run.close(outcome="completed")
                return {"run_id": run.run_id, "status": "finished", "epoch": run.epoch, "last_seq": run.state.last_seq}
            run.append("model_turn", **scripted_model(run))
        run.close()
        return {"run_id": run.run_id, "status": "finished", "epoch": run.epoch, "last_seq": run.state.last_seq}
    except CallUncertain as exc:
        # Leave the call to reconciliation and give the lease up, so recovery need not wait for it.
        run.close()
        return {"run_id": run.run_id, "status": "uncertain", "idempotency_key": exc.idempotency_key, "start_seq": exc.start_seq, "detail": str(exc)}


def demo_main(*, run_id: str | None, transport, effect_file: str | None, effect_url: str | None, ttl: float, retry_uncertain: bool) -> dict:
    tool = http_tool(effect_url) if effect_url else file_tool(effect_file or "demo-effects.jsonl")
    run = open_run(run_id, transport=transport, ttl=ttl, tenant="acme")
    return agent_run(run=run, tool=tool, retry_uncertain=retry_uncertain)
