"""An agent that posts the same correction twice on purpose, through a framework adapter: a LangGraph
graph (``ToolNode``, LangChain Core's ``GenericFakeChatModel``) or a Pydantic AI agent
(``FunctionModel``), offline. Run in a fresh environment holding only the client and its extra.

    python repeat_agent.py langgraph|pydantic-ai new|same|none sequential|parallel

``sequential``: the model asks for the correction, reads the answer, asks for it again; ``parallel``:
one model turn asks for it twice, and the framework runs both calls at once. ``repeat`` is the
adapter's option, given for the tool by name (``none``: not given). The tool posts to the ledger of examples/ledger.py
(``LEDGER_URL``) with the call's key. RECKON_URL, RECKON_TOKEN and RECKON_RUN_ID name the run.
Leaves the run open for a later session. Prints one JSON line (with the keys it posted with and the
tool results its model was given); exit 0 done, 3 uncertain.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import urllib.request

from reckon_client import CallUncertain, current_idempotency_key, open_run

ARGS = {"account": "C-771", "amount": 840}
posted: list[str] = []  # the keys this process posted with
answers = [0]  # the most tool results the model has been given


def post(account: str, amount: int) -> dict:
    key = current_idempotency_key()
    body = json.dumps({"account": account, "amount": amount}).encode()
    req = urllib.request.Request(os.environ["LEDGER_URL"] + "/operations", data=body, method="POST", headers={"Content-Type": "application/json", "Idempotency-Key": key})
    posted.append(key)
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())


def langgraph_agent(repeat: dict | None, shape: str) -> None:
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, HumanMessage
    from langchain_core.tools import tool
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    from reckon_client.langgraph import recorded_tools

    @tool
    def post_correction(account: str, amount: int) -> dict:
        """Post a correction to an account."""
        return post(account, amount)

    def ask(i: int) -> dict:
        return {"name": "post_correction", "args": ARGS, "id": f"lg-{i}"}

    turns = [[ask(1)], [ask(2)]] if shape == "sequential" else [[ask(1), ask(2)]]
    model = GenericFakeChatModel(messages=iter([*(AIMessage("", tool_calls=t) for t in turns), AIMessage("Posted.")]))
    graph = StateGraph(MessagesState)
    def agent(state: MessagesState) -> dict:
        answers[0] = max(answers[0], sum(m.type == "tool" for m in state["messages"]))
        return {"messages": [model.invoke(state["messages"])]}

    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode(recorded_tools([post_correction], repeat=repeat)))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    graph.compile().invoke({"messages": [HumanMessage("Post the correction twice")]})


def pydantic_ai_agent(repeat: dict | None, shape: str) -> None:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import FunctionModel
    from pydantic_ai.toolsets import FunctionToolset

    from reckon_client.pydantic_ai import RecordedToolset

    def post_correction(account: str, amount: int) -> dict:
        """Post a correction to an account."""
        return post(account, amount)

    def model(messages, info) -> ModelResponse:
        done = sum(isinstance(p, ToolReturnPart) for m in messages for p in m.parts)
        answers[0] = max(answers[0], done)
        if shape == "sequential" and done < 2:
            return ModelResponse(parts=[ToolCallPart("post_correction", ARGS)])
        if shape == "parallel" and done == 0:
            return ModelResponse(parts=[ToolCallPart("post_correction", ARGS, tool_call_id="pa-1"), ToolCallPart("post_correction", ARGS, tool_call_id="pa-2")])
        return ModelResponse(parts=[TextPart("Posted.")])

    agent = Agent(FunctionModel(model), toolsets=[RecordedToolset(FunctionToolset([post_correction]), repeat=repeat)])
    asyncio.run(agent.run("Post the correction twice"))


def uncertain_in(exc: BaseException) -> CallUncertain:
    """The ``CallUncertain`` ``exc`` is or holds (calls run at once may raise it in a group); any
    other exception is raised again."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) >= 1 and not isinstance(exc, CallUncertain):
        exc = next((e for e in exc.exceptions if isinstance(e, (CallUncertain, BaseExceptionGroup))), exc.exceptions[0])
    if not isinstance(exc, CallUncertain):
        raise exc
    return exc


def main() -> int:
    framework, repeat, shape = sys.argv[1:4]
    repeat = None if repeat == "none" else {"post_correction": repeat}
    agent = {"langgraph": langgraph_agent, "pydantic-ai": pydantic_ai_agent}[framework]
    with open_run() as run:
        try:
            agent(repeat, shape)
        except Exception as exc:
            exc = uncertain_in(exc)
            print(json.dumps({"status": "uncertain", "epoch": run.epoch, "idempotency_key": exc.idempotency_key, "posted": posted, "answers": answers[0]}), flush=True)
            return 3
        # Not finished: a second process on the run is a later session of the same agent.
        print(json.dumps({"status": "done", "epoch": run.epoch, "posted": posted, "answers": answers[0]}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
