"""A LangGraph agent whose tool calls are recorded in Reckon: a real graph (model node, ToolNode,
the usual loop) that reads a balance and posts a correction.

The model is LangChain Core's offline fake (``GenericFakeChatModel``) replaying a script, so this
runs with no network and no API key; put a real chat model (``ChatOpenAI(...).bind_tools(tools)``)
in its place and nothing else changes.

    RECKON_URL=http://127.0.0.1:8000 RECKON_TOKEN=... [RECKON_RUN_ID=run-lg-1] python examples/langgraph_agent.py

Run it again with the same RECKON_RUN_ID after killing it inside ``post_correction`` (start the
ledger with ``--stall``): the balance is not read again, and the correction is left uncertain in
Reckon instead of being posted twice. Exit 0: finished; 3: a call is uncertain.
"""

from __future__ import annotations

import sys

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from ledger_tools import ledger
from reckon_client import CallUncertain, current_idempotency_key, open_run
from reckon_client.langgraph import recorded_tools


@tool
def look_up_balance(account: str) -> dict:
    """Read an account's balance."""
    return ledger.balance(account)


@tool
def post_correction(account: str, amount: int) -> dict:
    """Post a correction to an account."""
    return ledger.post(account, amount, idempotency_key=current_idempotency_key())


def scripted_model() -> GenericFakeChatModel:
    return GenericFakeChatModel(
        messages=iter(
            [
                AIMessage("", tool_calls=[{"name": "look_up_balance", "args": {"account": "C-771"}, "id": "lg-1"}]),
                AIMessage("", tool_calls=[{"name": "post_correction", "args": {"account": "C-771", "amount": 840}, "id": "lg-2"}]),
                AIMessage("Posted the Q3 correction of 840 to C-771."),
            ]
        )
    )


def build_graph():
    model = scripted_model()
    graph = StateGraph(MessagesState)
    graph.add_node("agent", lambda state: {"messages": [model.invoke(state["messages"])]})
    graph.add_node("tools", ToolNode(recorded_tools([look_up_balance, post_correction])))  # each call through Reckon
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile()


def main() -> int:
    with open_run() as run:  # RECKON_URL, RECKON_TOKEN; RECKON_RUN_ID names the run to start or resume
        print(f"run {run.run_id} epoch {run.epoch}", flush=True)
        try:
            final = build_graph().invoke({"messages": [HumanMessage("Correct account C-771 for Q3")]})
        except CallUncertain as exc:
            print(f"uncertain: {exc.idempotency_key}: left for Reckon's reconciliation, not run again", flush=True)
            return 3
        print(final["messages"][-1].content, flush=True)
        run.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
