"""The agent client's rule for intentional repeats (``Run.invoke(..., repeat=...)``, docs/agents.md,
"Intentional repeats") and its clean failed start, in-process on the store: fast, and the same code
the HTTP transport runs (the MCP proxy's tests drive it end to end)."""

from __future__ import annotations

import pytest
from reckon_client import ToolCall, open_run

from runs.client import StoreTransport
from runs.store import events_read
from tests.clients.helpers import CountingTool

pytestmark = pytest.mark.django_db(transaction=True)

COMMIT = ("git_commit", {"repo_path": "/r", "message": "wip"})


def _ops(run_id: str) -> list[str | None]:
    starts = [e.payload for e in events_read(run_id=run_id) if e.type == "tool_call_started"]
    return [None if s["operation_id"] == s["idempotency_key"] else s["operation_id"] for s in starts]


def test_a_call_asked_again_after_it_completed_runs_again_and_a_resumed_session_maps_to_the_same_keys():
    run_id = "run-repeats"
    tool = CountingTool("committed")
    first = open_run(run_id, transport=StoreTransport(), holder="a", renew=False)
    results = [first.invoke(ToolCall.new(*COMMIT), tool, repeat="same") for _ in range(2)]
    assert tool.calls == 2 and [r.replayed for r in results] == [False, False]
    keys = [r.idempotency_key for r in results]
    first.close()

    # The same session resumed: the same two calls, in order, are the same two operations.
    again = open_run(run_id, transport=StoreTransport(), holder="b", renew=False)
    resumed = [again.invoke(ToolCall.new(*COMMIT), tool, repeat="same") for _ in range(2)]
    assert tool.calls == 2 and [r.replayed for r in resumed] == [True, True]
    assert [r.idempotency_key for r in resumed] == keys
    # A third one, after both completed in this session, is the next operation.
    third = again.invoke(ToolCall.new(*COMMIT), tool, repeat="same")
    assert tool.calls == 3 and not third.replayed
    again.close()
    assert _ops(run_id) == [None, "repeat@1", "repeat@2"]


def test_repeat_new_runs_a_call_the_log_completed_and_no_repeat_keeps_the_log_answer():
    run_id = "run-repeats-new"
    clock = CountingTool("12:00")
    run = open_run(run_id, transport=StoreTransport(), holder="a", renew=False)
    run.invoke(ToolCall.new("get_current_time", {"timezone": "UTC"}), clock)
    run.close()
    resumed = open_run(run_id, transport=StoreTransport(), holder="b", renew=False)
    assert resumed.invoke(ToolCall.new("get_current_time", {"timezone": "UTC"}), clock).replayed  # repeat=None: as before
    assert not resumed.invoke(ToolCall.new("get_current_time", {"timezone": "UTC"}), clock, repeat="new").replayed
    assert clock.calls == 2
    resumed.close()
    with pytest.raises(ValueError, match="repeat must be 'new' or 'same'"):
        resumed.session_call(ToolCall.new("x", {}), "twice")


class UnreadableState(StoreTransport):
    """Takes the lease, then cannot read the run (as a token without the read scope)."""

    def opened(self, run_id):
        raise PermissionError("no read scope")


def test_a_start_that_fails_after_taking_the_lease_releases_it():
    with pytest.raises(PermissionError):
        open_run("run-failed-start", transport=UnreadableState(), holder="a", ttl=60, renew=False)
    run = open_run("run-failed-start", transport=StoreTransport(), holder="b", ttl=60, wait=0, renew=False)
    assert run.epoch == 2  # the first start's lease was released, not waited for
    run.close()


def test_a_tool_decorated_with_repeat_runs_again_when_asked_again_in_the_process():
    effects = []

    with open_run("run-repeats-tool", transport=StoreTransport(), holder="a", renew=False) as run:

        @run.tool(repeat="same")
        def write_file(path: str, content: str) -> str:
            effects.append(content)
            return "written"

        @run.tool
        def write_once(path: str, content: str) -> str:
            effects.append("once:" + content)
            return "written"

        for content in ("A", "B", "A"):
            write_file(path="/f", content=content)
        write_once(path="/f", content="A")
        write_once(path="/f", content="A")  # no repeat rule: the same arguments are one action
    assert effects == ["A", "B", "A", "once:A"]


def test_an_adapters_option_gives_each_tool_its_repeat_and_every_call_lets_its_key_go():
    from reckon_client.errors import CallUncertain, ToolFailed
    from reckon_client.repeats import repeat_of

    assert [repeat_of("new", "a"), repeat_of({"a": "same"}, "a"), repeat_of({"a": "same"}, "b"), repeat_of(None, "a")] == ["new", "same", None, None]

    def broken(arguments, *, idempotency_key):
        raise (ToolFailed("refused") if arguments["how"] == "failed" else TimeoutError("no answer"))

    run = open_run("run-repeats-gate", transport=StoreTransport(), holder="a", renew=False)
    run.invoke(ToolCall.new("t", {"how": "ok"}), CountingTool("done"), repeat="new")
    assert run.invoke(ToolCall.new("t", {"how": "ok"}), CountingTool("done")).replayed  # repeat@0 is the call itself
    assert run.invoke(ToolCall.new("t", {"how": "failed"}), broken, repeat="same").is_error
    with pytest.raises(CallUncertain):
        run.invoke(ToolCall.new("t", {"how": "lost"}), broken)
    with pytest.raises(CallUncertain):  # asked again: the open start is not passed over, even with "new"
        run.invoke(ToolCall.new("t", {"how": "lost"}), broken, repeat="new")
    assert run._gate.held() == 0  # a replay, a failure and an uncertain call each let their key go
    run.close()
    assert _ops("run-repeats-gate") == [None, None, None]


def test_an_agent_that_opens_a_finished_run_again_cannot_run_a_tool_under_it():
    from reckon_client import RunFinished

    run_id = "run-finished-reopened"
    tool = CountingTool("committed")
    first = open_run(run_id, transport=StoreTransport(), holder="a", renew=False)
    done = first.invoke(ToolCall.new(*COMMIT), tool)
    first.close(outcome="completed")
    last = [e.type for e in events_read(run_id=run_id)]
    assert last[-1] == "run_finished" and tool.calls == 1

    again = open_run(run_id, transport=StoreTransport(), holder="b", renew=False)
    # What the log already answers is answered, with nothing written...
    answered = again.invoke(ToolCall.new(*COMMIT), tool)
    assert answered.replayed and answered.idempotency_key == done.idempotency_key
    # ... but new work is refused before the tool runs: its start is the agent's own event.
    for call, repeat in ((ToolCall.new("git_push", {"repo_path": "/r"}), None), (ToolCall.new(*COMMIT), "new")):
        with pytest.raises(RunFinished, match=rf"run '{run_id}' already finished at seq {len(last)}; an agent's own events"):
            again.invoke(call, tool, **({"repeat": repeat} if repeat else {}))
    again.close()
    assert tool.calls == 1
    assert [e.type for e in events_read(run_id=run_id)] == last
