"""``manage.py bench peers``: Reckon against its peers on the same PostgreSQL server (docs/benchmarks.md).

The peers are the ``peers`` extra (``pip install '.[peers]'``), never a runtime dependency: the
eventsourcing library's PostgreSQL application recorder and a DBOS workflow of durable steps, each in
a database of its own beside the benchmark's. Every figure is a ratio, Reckon's rate over the peer's,
taken in rounds: within a round the two take turns call by call (``bench.store.rates_in_turn``), so
a commit's fsync or another process's burst reaches both alike; a round gives one ratio, and the
figure is the median of the rounds' ratios. Replays are timed in turn, one of each per repeat.

Only public APIs on both sides: Reckon's store (``events_append``, ``run_state``) and its agent
client with the in-process transport; eventsourcing's recorder (``insert_events``,
``select_events``) and transcoder; DBOS's decorators and ``launch``/``destroy``.
"""

from __future__ import annotations

import statistics
import time
from contextlib import contextmanager
from typing import Callable

import psycopg
from django.core.management.base import CommandError
from django.db import connection
from django.test.utils import override_settings

from bench.invoke import instant_tool, numbered_call
from bench.notify import ROUTES
from bench.store import rates_in_turn, run_build
from notify.config import notifications_load
from reckon_client import open_run
from runs.client import StoreTransport
from runs.selectors import run_state
from runs.store import NewEvent, events_append
from runs.synthetic import synthetic_events

# (figure, what Reckon does, what the peer does, floor): the floors, in the order printed.
FLOORS = (
    ("tool_call", "recorded tool call, in-process client (start and completion, both durable)", "DBOS durable steps/s", 3.0),
    ("single_append", "fenced single append", "eventsourcing single-event insert", 2.0),
    ("batch_with_rules", "100-event batch, every read-model rule applied", "eventsourcing 100-event insert", 1.0),
    ("batch_model_turns", "100-event batch of model turns (no rule touches them)", "eventsourcing 100-event insert", 2.0),
    ("replay", "replay of {replay:,} events, fold included", "eventsourcing read and decode", 1.25),
)
DBOS_STEPS = 10  # durable steps per DBOS workflow by default: an agent's loop is one workflow, its tool calls its steps
TOPIC = "reckon.bench:Event"  # the peer's events are stored, never turned back into classes


def _peers():
    """The peer libraries, or a CommandError saying how to install them."""
    try:
        import dbos
        from eventsourcing import persistence, postgres
    except ImportError as exc:
        raise CommandError(f"bench peers needs the peers extra ({exc.name} is missing): pip install -e '.[peers]'") from None
    return dbos, persistence, postgres


def _server() -> dict:
    s = connection.settings_dict
    return {"host": s["HOST"] or "127.0.0.1", "port": int(s["PORT"] or 5432), "user": s["USER"] or "postgres", "password": s["PASSWORD"] or ""}


@contextmanager
def _database(name: str):
    """A database of its own on the benchmark's server, dropped afterwards."""
    server = _server()
    with psycopg.connect(dbname="postgres", autocommit=True, **server) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield {"dbname": name, **server}
    finally:
        with psycopg.connect(dbname="postgres", autocommit=True, **server) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class EventsourcingPeer:
    """eventsourcing's PostgreSQL application recorder: what an eventsourcing application writes
    through on PostgreSQL (optimistic concurrency on the aggregate's version, one transaction)."""

    def __init__(self, persistence, postgres, db: dict):
        self.persistence = persistence
        self.datastore = postgres.PostgresDatastore(db["dbname"], db["host"], db["port"], db["user"], db["password"], originator_id_type="text")
        self.recorder = postgres.PostgresApplicationRecorder(self.datastore)
        self.recorder.create_table()
        self.transcoder = persistence.JSONTranscoder()
        self.versions: dict[str, int] = {}

    def appender(self, stream: str, payloads: list[dict]) -> Callable[[], int]:
        """Inserts the payloads, encoded, as the stream's next events: one insert_events call."""

        def insert() -> int:
            v = self.versions.get(stream, 0)
            stored = [self.persistence.StoredEvent(stream, v + i + 1, TOPIC, self.transcoder.encode(p)) for i, p in enumerate(payloads)]
            self.recorder.insert_events(stored)
            self.versions[stream] = v + len(payloads)
            return len(payloads)

        return insert

    def read(self, stream: str) -> int:
        """The stream's events read and their states decoded."""
        return len([self.transcoder.decode(e.state) for e in self.recorder.select_events(stream)])

    def close(self) -> None:
        self.datastore.close()


@contextmanager
def _dbos_workflow(dbos, db: dict, steps: int):
    """A launched DBOS with one workflow of ``steps`` durable steps; yields a function that runs it
    once and returns the steps it made durable. Once a process: DBOS is a process-wide instance."""
    url = f"postgresql://{db['user']}:{db['password']}@{db['host']}:{db['port']}/{db['dbname']}"
    dbos.DBOS(config={"name": "reckon-bench-peers", "system_database_url": url, "log_level": "WARNING"})

    @dbos.DBOS.step()
    def step(i: int) -> int:
        return i

    @dbos.DBOS.workflow()
    def workflow(n: int) -> int:
        return sum(step(i) for i in range(n))

    def run_once() -> int:
        workflow(steps)
        return steps

    dbos.DBOS.launch()
    try:
        yield run_once
    finally:
        dbos.DBOS.destroy(destroy_registry=True)


def _reckon_appender(run_id: str, events: list[NewEvent], *, setup: tuple[NewEvent, ...] = ()) -> Callable[[], int]:
    """Fenced appends of ``events`` to a run of its own, which starts with ``setup``. The events are
    built once, as the peer's payloads are: what is timed is the append, not a test-data generator."""
    epoch = run_build(run_id, 1)
    if setup:
        events_append(run_id=run_id, epoch=epoch, expected_seq=1, events=list(setup))
    at = {"seq": 1 + len(setup)}

    def append() -> int:
        events_append(run_id=run_id, epoch=epoch, expected_seq=at["seq"], events=events)
        at["seq"] += len(events)
        return len(events)

    return append


def _with_rules(run_id: str) -> tuple[list[NewEvent], tuple[NewEvent, ...]]:
    """100 events touching every read-model rule, and the run's start they need: model turns with
    tool starts and completions (the uncertain-call projection, the run-tenant model) and a person
    asked about an uncertain call (the projection and the notification outbox, routes loaded)."""
    call = {"call_id": "uncertain", "idempotency_key": f"{run_id}-uncertain"}
    setup = (
        NewEvent("tool_call_started", {**call, "name": "post_note", "arguments": {"tenant": "acme", "n": 0}}),
        NewEvent("tool_call_uncertain", {**call, "start_seq": 2, "reason": "timeout"}),
    )
    asked = NewEvent("approval_requested", {**call, "start_seq": 2, "question": "did it happen?", "reason": "conflict"})
    return [*synthetic_events(run_id, 4, 99), asked], setup


def _ratio_rounds(rounds: dict[str, list[float]]) -> list[float]:
    return [r / p for r, p in zip(rounds["reckon"], rounds["peer"])]


def _appends(es: EventsourcingPeer, *, seconds: float, windows: int) -> dict[str, list[float]]:
    single = {"content": "hello from the fenced append", "n": 1}
    turns = [e for e in synthetic_events("bench-peers-turns", 2, 300) if e.type == "model_turn"][:100]
    mixed, setup = _with_rules("bench-peers-rules")
    notifications_load(text=ROUTES, by="bench")
    pairs = {
        "single_append": (_reckon_appender("bench-peers-single", [NewEvent("user_message", single)]), es.appender("single", [single])),
        "batch_with_rules": (_reckon_appender("bench-peers-rules", mixed, setup=setup), es.appender("rules", [{"type": e.type, **e.payload} for e in mixed])),
        "batch_model_turns": (_reckon_appender("bench-peers-turns", turns), es.appender("turns", [e.payload for e in turns])),
    }
    with override_settings(RECKON_NOTIFY_DELIVER_ON_COMMIT=False):
        return {name: _ratio_rounds(rates_in_turn({"reckon": r, "peer": p}, seconds=seconds, windows=windows)) for name, (r, p) in pairs.items()}


def _replays(es: EventsourcingPeer, n: int, repeats: int) -> list[float]:
    run_build("bench-peers-replay", n)
    es.appender("replay", [e.payload for e in synthetic_events("bench-peers-replay", 2, n)])()
    sides = {"reckon": lambda: run_state(run_id="bench-peers-replay"), "peer": lambda: es.read("replay")}
    for replay in sides.values():  # statements prepared, caches warm
        replay()
    ratios = []
    for i in range(repeats):
        spent = {}
        for name in sorted(sides, reverse=i % 2 == 1):  # each side first in every other repeat
            t0 = time.perf_counter()
            sides[name]()
            spent[name] = time.perf_counter() - t0
        ratios.append(spent["peer"] / spent["reckon"])
    return ratios


def _tool_calls(dbos, db: dict, *, steps: int, seconds: float, windows: int) -> list[float]:
    run = open_run("bench-peers-invoke", transport=StoreTransport(), ttl=3600, renew=False)
    numbers = iter(range(10**9))

    def call_one() -> int:
        run.invoke(numbered_call("bench-peers-invoke", next(numbers)), instant_tool)
        return 1

    with _dbos_workflow(dbos, db, steps) as workflow:
        for _ in range(20):  # statements prepared, pools warm
            call_one(), workflow()
        rounds = rates_in_turn({"reckon": call_one, "peer": workflow}, seconds=seconds, windows=windows)
    run.close(release=True)
    return _ratio_rounds(rounds)


def bench_peers(*, quick: bool = False, out=None, dbos_steps: int | None = None) -> dict:
    if connection.vendor != "postgresql":
        raise CommandError(f"bench peers needs PostgreSQL (the peers run on PostgreSQL only); this database is {connection.vendor}: set DATABASE_URL=postgres://...")
    dbos, persistence, postgres = _peers()
    seconds, windows, replay_n, repeats = (0.3, 3, 400, 3) if quick else (2.0, 5, 4000, 9)
    name, steps = connection.settings_dict["NAME"], dbos_steps or DBOS_STEPS
    # Snapshots are written after the commit and have their own suite (bench snapshots).
    with override_settings(RECKON_SNAPSHOT_INTERVAL=0), _database(f"{name}_es") as es_db, _database(f"{name}_dbos") as dbos_db:
        es = EventsourcingPeer(persistence, postgres, es_db)
        try:
            rounds = {"tool_call": _tool_calls(dbos, dbos_db, steps=steps, seconds=seconds, windows=windows)}
            rounds.update(_appends(es, seconds=seconds, windows=windows))
            rounds["replay"] = _replays(es, replay_n, repeats)
        finally:
            es.close()
    figures: dict = {"engine": "postgresql", "replay_events": replay_n, "dbos_steps_per_workflow": steps, "windows": windows, "seconds": seconds}
    for key, *_rest in FLOORS:
        figures[key] = round(statistics.median(rounds[key]), 3)
        figures[f"{key}_rounds"] = [round(r, 3) for r in rounds[key]]
    if out is not None:
        _print(out, figures)
    return figures


def _print(out, figures: dict) -> None:
    out.write(
        f"bench peers on PostgreSQL: Reckon's rate over the peer's, median of {figures['windows']} rounds ({len(figures['replay_rounds'])} replays); "
        f"DBOS steps a workflow: {figures['dbos_steps_per_workflow']}\n"
    )
    labels = [f"{what.format(replay=figures['replay_events'])} vs {peer}" for _key, what, peer, _floor in FLOORS]
    width = max(map(len, labels))
    out.write(f"  {'figure':<{width}}   ratio   floor  holds  rounds\n")
    for label, (key, _what, _peer, floor) in zip(labels, FLOORS):
        holds = "yes" if figures[key] >= floor else "NO"
        out.write(f"  {label:<{width}}  {figures[key]:>5.2f}x  >={floor:.2f}x  {holds:<5}  {figures[f'{key}_rounds']}\n")
