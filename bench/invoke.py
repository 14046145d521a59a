"""``manage.py bench invoke``: recorded tool calls per second, the agent's hot path.

Every tool call an agent makes through Reckon is two durable appends: ``tool_call_started`` before
the tool runs and ``tool_call_completed`` after. Here a tool that returns at once is invoked
through ``reckon_client.open_run`` with the in-process transport (one process, one run), and through
the HTTP transport against gunicorn (several workers, several agents each on its own run and thread),
side by side with the raw single-row INSERT commit rate measured in the same run: the physical
reference, since a recorded call cannot be cheaper than two commits. The target is an in-process
rate of at least 0.6 x (raw inserts/s / 2). A round is about 1,000 in-process calls, and each HTTP
window 8 agents of 150 calls on 4 workers; ``--quick`` (a smoke run) takes about 150 calls a round
and windows of 4 agents of 10 calls on 2 workers.

On PostgreSQL the statements (round trips) each call costs are counted from libpq's own trace of
the connection: every message exchange that ends in ReadyForQuery is one round trip, whatever
issued it (the ORM, a psycopg cursor, BEGIN or COMMIT).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import threading
import time

from django.db import connection
from django.test.utils import override_settings

from access.tokens import token_create
from bench.api import gunicorn_ready, gunicorn_spawn
from bench.store import raw_insert, rates_in_turn
from reckon_client import ToolCall, open_run
from runs.client import StoreTransport
from runs.pg import round_trips_count


def instant_tool(arguments, *, idempotency_key):
    """A tool that returns at once: what remains of a call is Reckon's own work."""
    return {"ok": True, "key": idempotency_key}


def numbered_call(prefix: str, i: int) -> ToolCall:
    """Call number ``i`` of a series: distinct arguments per call, so every call is its own logical
    action (no replayed key). ``bench peers`` times the same calls."""
    return ToolCall(f"{prefix}-{i}", "post_note", {"tenant": "acme", "n": i, "batch": prefix})


def _calls(prefix: str, n: int) -> list[ToolCall]:
    return [numbered_call(prefix, i) for i in range(n)]


def _statements_per_call() -> dict[str, float]:
    """Round trips of a start append, a completion append and a whole invoke, after warming
    (statements prepared), each averaged over 50 calls traced together."""
    run = open_run("bench-invoke-count", transport=StoreTransport(), ttl=3600, renew=False)
    for call in _calls("warm", 20):
        run.invoke(call, instant_tool)
    n = 50
    calls = _calls("count", n)

    def starts() -> None:
        for call in calls:
            run.append("tool_call_started", call_id=call.id, name=call.name, arguments=call.arguments, idempotency_key=run.key_for(call), signature=call.signature())

    def completions() -> None:
        for call in calls:
            run.append("tool_call_completed", call_id=call.id, name=call.name, content={"ok": True}, is_error=False, idempotency_key=run.key_for(call), signature=call.signature(), source="live")

    def whole() -> None:
        for call in _calls("whole", n):
            run.invoke(call, instant_tool)

    counts = {"start": round_trips_count(starts) / n, "completion": round_trips_count(completions) / n, "call": round_trips_count(whole) / n}
    run.close(release=True)
    return counts


def _http_window(port: int, secret: str, agents: int, n: int, tag: str) -> float:
    """``agents`` threads, each an agent with its own run and connection, ``n`` calls each. The
    agents open their runs at once, before the window; the window times their calls only."""
    # The agents' side of the HTTP figures is the reckon-client distribution (clients/python/).
    import reckon_client

    barrier = threading.Barrier(agents + 1)
    runs: list = []
    errors: list[BaseException] = []

    def agent(a: int) -> None:
        try:
            run = reckon_client.open_run(f"bench-http-{tag}-{a}", transport=reckon_client.HttpTransport(f"http://127.0.0.1:{port}/api", secret), ttl=3600, renew=False)
            runs.append(run)
            calls = _calls(run.run_id, n)
            barrier.wait()
            for call in calls:
                run.invoke(call, instant_tool)
        except threading.BrokenBarrierError:
            pass  # another agent could not open its run: its error is the one reported
        except Exception as exc:  # noqa: BLE001 (reported after the window, not swallowed)
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=agent, args=(a,)) for a in range(agents)]
    for t in threads:
        t.start()
    try:
        barrier.wait()
    except threading.BrokenBarrierError:
        pass  # an agent failed before the window: its error is raised below
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    if errors:
        raise errors[0]
    for r in runs:
        r.close(release=True)
    return agents * n / elapsed


def bench_invoke(*, quick: bool = False, out=None) -> dict:
    # Snapshots are written after the commit and measured by their own suite.
    with override_settings(RECKON_SNAPSHOT_INTERVAL=0):
        return _bench_invoke(quick=quick, out=out)


def _bench_invoke(*, quick: bool, out) -> dict:
    say = out.write if out is not None else (lambda _s: None)
    n = 150 if quick else 1000
    repeats = 3
    # Quick: half the servers and agents (two agents a worker, as in the full run), 10 calls each.
    workers, agents, http_n = (2, 4, 10) if quick else (4, 8, 150)
    say(f"invoke benchmark on {connection.vendor}: about {n} calls a round, median of {repeats} rounds\n")

    insert = raw_insert()
    counter = iter(range(1, 10**9))

    def raw_one() -> int:
        insert(next(counter))
        return 1

    run = open_run("bench-invoke-0", transport=StoreTransport(), ttl=3600, renew=False)
    numbers = iter(range(10**9))

    def call_one() -> int:
        run.invoke(numbered_call("bench-invoke-0", next(numbers)), instant_tool)
        return 1

    for _ in range(50):  # statements prepared, connections warm
        call_one()
        raw_one()

    # Call by call in turn with the raw inserts, so that a commit's fsync or another process's
    # burst reaches both alike; each round's own ratio, then their median.
    rounds = rates_in_turn({"raw": raw_one, "call": call_one}, seconds=n / 600, windows=repeats)  # about n calls a round at 600/s
    run.close(release=True)
    raw_rates, call_rates = rounds["raw"], rounds["call"]
    raw, calls = statistics.median(raw_rates), statistics.median(call_rates)
    target = 0.6 * raw / 2
    of_target_rounds = [c / (0.6 * r / 2) for c, r in zip(call_rates, raw_rates)]
    of_target = statistics.median(of_target_rounds)
    figures: dict = {
        "engine": connection.vendor,
        "raw_insert_per_s": round(raw, 1),
        "in_process_calls_per_s": round(calls, 1),
        "in_process_calls_per_s_rounds": [round(x, 1) for x in call_rates],
        "target_calls_per_s": round(target, 1),
        "in_process_vs_target": round(of_target, 3),
        "in_process_vs_target_rounds": [round(x, 3) for x in of_target_rounds],
    }
    # The in-process figures are printed before the HTTP part starts its servers, so that they
    # are not lost when that part fails.
    verdict = "meets" if of_target >= 1 else "MISSES"
    say(f"  raw single-row INSERT commits    {raw:>10,.0f} /s   (two per recorded call: ceiling {raw / 2:,.0f} calls/s)\n")
    say(
        f"  in-process recorded calls        {calls:>10,.0f} /s   ({verdict} the target 0.6 x raw/2 = {target:,.0f}: {of_target:.2f} of it, median of the rounds' "
        f"{figures['in_process_vs_target_rounds']}; call by call in turn with the raw inserts)\n"
    )
    figures.update(_served(say, workers=workers, agents=agents, http_n=http_n, repeats=repeats))
    return figures


def _served(say, *, workers: int, agents: int, http_n: int, repeats: int) -> dict:
    """The round trips a call costs (PostgreSQL) and the HTTP figures. gunicorn's workers import
    Django while this process counts the round trips: a count, which other work on the machine
    leaves as it is (unlike a rate), so the two overlap."""
    figures: dict = {}
    _, secret = token_create(name="bench invoke", scopes=["append", "read"])
    proc, port = gunicorn_spawn(workers=workers)
    try:
        if connection.vendor == "postgresql":
            counts = _statements_per_call()
            figures.update(round_trips_per_start=counts["start"], round_trips_per_completion=counts["completion"], round_trips_per_call=counts["call"])
            say(f"  round trips per start / completion / whole call   {counts['start']:.2f} / {counts['completion']:.2f} / {counts['call']:.2f}\n")
        gunicorn_ready(proc, port)
        _http_window(port, secret, 2, 10, "warm")
        http_rates = [_http_window(port, secret, agents, http_n, f"r{r}") for r in range(repeats)]
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
    figures["http_calls_per_s"] = round(statistics.median(http_rates), 1)
    figures["http_concurrency"] = f"gunicorn {workers} sync workers, {agents} agents on their own runs and threads, one keep-alive connection each"
    figures["cpu_count"] = os.cpu_count()

    say(f"  HTTP recorded calls              {figures['http_calls_per_s']:>10,.0f} /s   ({figures['http_concurrency']})\n")
    return figures
