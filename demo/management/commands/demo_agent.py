"""``manage.py demo_agent [--run-id ID] [--effect-file F | --effect-url U]``

Runs the scripted demo agent (demo/agent.py) once and prints one JSON line: finished, or
uncertain with the call's key. It writes through the store in this process (an agent outside
Reckon uses the reckon-client distribution: examples/).
Exit status: 0 finished, 3 stopped on an uncertain call.
"""

import json
import sys

from django.core.management.base import BaseCommand, CommandError
from reckon_client import ReckonError

from runs.client import StoreTransport
from demo.agent import demo_main
from runs.errors import StoreError


class Command(BaseCommand):
    help = "Run the scripted demo agent against a side-effecting tool."

    def add_arguments(self, parser):
        parser.add_argument("--run-id")
        parser.add_argument("--effect-file", help="counter file: one line per correction posted")
        parser.add_argument("--effect-url", help="receiver URL: POST with Idempotency-Key")
        parser.add_argument("--ttl", type=float, default=30.0, help="lease length in seconds")
        parser.add_argument("--retry-uncertain", action="store_true", help="the receiver honours keys: retry an uncertain call with its key")

    def handle(self, *args, run_id, effect_file, effect_url, ttl, retry_uncertain, **options):
        transport = StoreTransport()
        try:
            result = demo_main(run_id=run_id, transport=transport, effect_file=effect_file, effect_url=effect_url, ttl=ttl, retry_uncertain=retry_uncertain)
        except (StoreError, ReckonError, ValueError) as exc:  # a held lease is the client's ReckonError
            raise CommandError(f"demo agent stopped: {exc}") from None
        self.stdout.write(json.dumps(result))
        if result["status"] != "finished":
            sys.exit(3)
