"""A Pydantic AI agent whose tool calls are recorded in Reckon: it reads a balance and posts a
correction, its toolset wrapped by ``RecordedToolset``.

The model is Pydantic AI's ``FunctionModel`` following a script (no network, no API key); give the
agent a real model (``Agent("openai:gpt-5", ...)``) and nothing else changes.

    RECKON_URL=http://127.0.0.1:8000 RECKON_TOKEN=... [RECKON_RUN_ID=run-pa-1] python examples/pydantic_ai_agent.py

Run it again with the same RECKON_RUN_ID after killing it inside ``post_correction`` (start the
ledger with ``--stall``): the balance is not read again, and the correction is left uncertain in
Reckon instead of being posted twice. Exit 0: finished; 3: a call is uncertain.
"""

from __future__ import annotations

import asyncio
import sys

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.toolsets import FunctionToolset

from ledger_tools import ledger
from reckon_client import CallUncertain, aio, current_idempotency_key
from reckon_client.pydantic_ai import RecordedToolset


def look_up_balance(account: str) -> dict:
    """Read an account's balance."""
    return ledger.balance(account)


def post_correction(account: str, amount: int) -> dict:
    """Post a correction to an account."""
    return ledger.post(account, amount, idempotency_key=current_idempotency_key())


def scripted_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    done = [p.tool_name for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
    if not done:
        return ModelResponse(parts=[ToolCallPart("look_up_balance", {"account": "C-771"})])
    if done == ["look_up_balance"]:
        return ModelResponse(parts=[ToolCallPart("post_correction", {"account": "C-771", "amount": 840})])
    return ModelResponse(parts=[TextPart("Posted the Q3 correction of 840 to C-771.")])


agent = Agent(FunctionModel(scripted_model), toolsets=[RecordedToolset(FunctionToolset([look_up_balance, post_correction]))])


async def main() -> int:
    async with aio.open_run() as run:  # RECKON_URL, RECKON_TOKEN; RECKON_RUN_ID names the run to start or resume
        print(f"run {run.run_id} epoch {run.epoch}", flush=True)
        try:
            result = await agent.run("Correct account C-771 for Q3")
        except CallUncertain as exc:
            print(f"uncertain: {exc.idempotency_key}: left for Reckon's reconciliation, not run again", flush=True)
            return 3
        print(result.output, flush=True)
        await run.finish()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
