"""``manage.py bench SUITE [--json]``: benchmarks that print figures, never timed tests.

Each suite is a function ``run(*, quick: bool) -> dict`` (figures by name) named here by dotted path,
so an app adds a suite with one line. Suites run against a throwaway database created beside the
configured one (same engine, same server), so benchmarking never writes into real data.
"""

import json
import sys
from importlib import import_module

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import connection

SUITES: dict[str, str] = {
    "store": "bench.store:bench_store",
    "recovery": "bench.recovery:bench_recovery",
    "snapshots": "bench.snapshots:bench_snapshots",
    "api": "bench.api:bench_api",
    "console": "bench.console:bench_console",
    "invoke": "bench.invoke:bench_invoke",
}


class Command(BaseCommand):
    help = "Run benchmark suites on the configured database engine and print their figures."

    def add_arguments(self, parser):
        parser.add_argument("suite", choices=[*SUITES, "all"])
        parser.add_argument("--json", action="store_true", help="print figures as one JSON object")
        parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
        parser.add_argument("--keep-db", action="store_true", help="reuse the benchmark database between runs")

    def handle(self, *args, suite, **options):
        # Measure what production runs: without DEBUG's per-query logging.
        settings.DEBUG = False
        names = list(SUITES) if suite == "all" else [suite]
        old_name = connection.settings_dict["NAME"]
        creation = connection.creation
        creation.create_test_db(verbosity=0, autoclobber=True, keepdb=options["keep_db"])
        results: dict[str, dict] = {}
        try:
            for name in names:
                module, func = SUITES[name].split(":")
                try:
                    results[name] = getattr(import_module(module), func)(quick=options["quick"], out=None if options["json"] else self.stdout)
                except Exception as exc:  # a broken suite is reported, the others still run
                    raise CommandError(f"bench {name} failed: {type(exc).__name__}: {exc}") from exc
        finally:
            creation.destroy_test_db(old_name, verbosity=0, keepdb=options["keep_db"])
        if options["json"]:
            doc = results[names[0]] if len(names) == 1 else results
            json.dump(doc, sys.stdout, indent=2)
            sys.stdout.write("\n")
