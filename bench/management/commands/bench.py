"""``manage.py bench SUITE [--json]``: benchmarks that print figures, never timed tests.

Each suite is a function ``run(*, quick: bool) -> dict`` (figures by name) named here by dotted path,
so an app adds a suite with one line. Suites run against a throwaway database created beside the
configured one (same engine, same server), so benchmarking never writes into real data.
"""

import argparse
import json
import logging
import math
import os
import sys
from importlib import import_module

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from recovery.outbound import outbound_allow

SUITES: dict[str, str] = {
    "store": "bench.store:bench_store",
    "recovery": "bench.recovery:bench_recovery",
    "snapshots": "bench.snapshots:bench_snapshots",
    "api": "bench.api:bench_api",
    "console": "bench.console:bench_console",
    "invoke": "bench.invoke:bench_invoke",
    "load": "bench.load:bench_load",
    "scale": "bench.scale:bench_scale",
    "peers": "bench.peers:bench_peers",
}
# Suites that `all` leaves out, with the options only they take: the load test starts its own
# servers, needs PostgreSQL and Redis, and runs for a set time (docs/load.md); the peers need the
# `peers` extra and PostgreSQL (docs/benchmarks.md).
ON_DEMAND: dict[str, tuple[str, ...]] = {"load": ("duration", "agents", "operators", "web_workers", "drain"), "scale": ("max_events", "log_events", "repeats"), "peers": ("dbos_steps",)}


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value


def _positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return int(text)


class Command(BaseCommand):
    help = "Run benchmark suites on the configured database engine and print their figures."

    def add_arguments(self, parser):
        parser.add_argument("suite", choices=[*SUITES, "all"])
        parser.add_argument("--json", action="store_true", help="print figures as one JSON object")
        parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
        parser.add_argument("--keep-db", action="store_true", help="reuse the benchmark database between runs")
        parser.add_argument("--routes", action="store_true", help="bench store: also time escalation appends with notification routes loaded against none")
        load = parser.add_argument_group("load", "options of `bench load`")
        load.add_argument("--duration", type=_positive, default=60, help="seconds of load (default 60)")
        load.add_argument("--agents", type=_positive_int, default=10, help="agents appending through the API (default 10)")
        load.add_argument("--operators", type=_positive_int, default=5, help="operators signed in to the console (default 5)")
        load.add_argument("--web-workers", type=_positive_int, default=4, help="gunicorn workers (default 4)")
        load.add_argument("--drain", type=_positive, default=60, help="seconds to wait after the load for reconciliation (default 60)")
        scale = parser.add_argument_group("scale", "options of `bench scale` (docs/scale.md)")
        scale.add_argument("--max-events", type=_positive_int, default=None, help="the largest store, in events (default 1,000,000; 10,000,000 adds the third size)")
        scale.add_argument("--log-events", type=_positive_int, default=None, help="events of the generated log imported, exported and replayed (default 100,000)")
        scale.add_argument("--repeats", type=_positive_int, default=3, help="imports, exports and replays of the log for the medians (default 3)")
        peers = parser.add_argument_group("peers", "options of `bench peers` (docs/benchmarks.md)")
        peers.add_argument("--dbos-steps", type=_positive_int, default=None, help="durable steps per DBOS workflow (default 10)")

    def handle(self, *args, suite, **options):
        # Measure what production runs: without DEBUG's per-query logging.
        settings.DEBUG = False
        # The suites call receivers they start on this machine (ledgers, webhook sinks): named, as
        # an operator names theirs, for this process and the workers it starts.
        outbound_allow("127.0.0.1")
        # The decision log writes a line per recovery event at INFO: thousands a suite, on stderr,
        # between the figures. The benchmark's own process logs warnings up, as the workers it
        # starts do (ERROR), unless RECKON_LOG_LEVEL asks for more.
        if "RECKON_LOG_LEVEL" not in os.environ:
            logging.getLogger("reckon").setLevel(logging.WARNING)
        names = [n for n in SUITES if n not in ON_DEMAND] if suite == "all" else [suite]
        old_name = connection.settings_dict["NAME"]
        creation = connection.creation
        creation.create_test_db(verbosity=0, autoclobber=True, keepdb=options["keep_db"])
        results: dict[str, dict] = {}
        try:
            for name in names:
                module, func = SUITES[name].split(":")
                try:
                    extra = {k: options[k] for k in ON_DEMAND.get(name, ())}
                    if name == "store" and options["routes"]:
                        extra["routes"] = True
                    results[name] = getattr(import_module(module), func)(quick=options["quick"], out=None if options["json"] else self.stdout, **extra)
                except CommandError:  # the suite's own message (a missing extra, the wrong engine)
                    raise
                except Exception as exc:  # a broken suite is reported, the others still run
                    raise CommandError(f"bench {name} failed: {type(exc).__name__}: {exc}") from exc
        finally:
            creation.destroy_test_db(old_name, verbosity=0, keepdb=options["keep_db"])
        if options["json"]:
            doc = results[names[0]] if len(names) == 1 else results
            json.dump(doc, sys.stdout, indent=2)
            sys.stdout.write("\n")
