"""``manage.py demo_agent [--run-id ID] [--api URL --token T] [--effect-file F | --effect-url U]``

Runs the scripted demo agent (runs/demo_agent.py) once and prints one JSON line: finished, or
uncertain with the call's key. Without --api it writes through the store in this process.
Exit status: 0 finished, 3 stopped on an uncertain call.
"""

import json
import os
import sys

from django.core.management.base import BaseCommand, CommandError

from runs.client import HttpTransport, StoreTransport
from runs.demo_agent import demo_main
from runs.errors import StoreError


class Command(BaseCommand):
    help = "Run the scripted demo agent against a side-effecting tool."

    def add_arguments(self, parser):
        parser.add_argument("--run-id")
        parser.add_argument("--api", help="Reckon's API base URL, e.g. http://127.0.0.1:8000/api")
        parser.add_argument("--token", help="an API token with the append and read scopes (or RECKON_TOKEN)")
        parser.add_argument("--effect-file", help="counter file: one line per correction posted")
        parser.add_argument("--effect-url", help="receiver URL: POST with Idempotency-Key")
        parser.add_argument("--ttl", type=float, default=30.0, help="lease length in seconds")
        parser.add_argument("--retry-uncertain", action="store_true", help="the receiver honours keys: retry an uncertain call with its key")

    def handle(self, *args, run_id, api, token, effect_file, effect_url, ttl, retry_uncertain, **options):
        if api:
            token = token or os.environ.get("RECKON_TOKEN")
            if not token:
                raise CommandError("--api needs --token (or RECKON_TOKEN)")
            transport = HttpTransport(api, token)
        else:
            transport = StoreTransport()
        try:
            result = demo_main(run_id=run_id, transport=transport, effect_file=effect_file, effect_url=effect_url, ttl=ttl, retry_uncertain=retry_uncertain)
        except (StoreError, ValueError) as exc:
            raise CommandError(f"demo agent stopped: {exc}") from None
        self.stdout.write(json.dumps(result))
        if result["status"] != "finished":
            sys.exit(3)
