"""``manage.py uncertain [--json] [--state S]``: the uncertain calls, most dangerous first (CONTRACTS section 6)."""

import json

from django.core.management.base import BaseCommand, CommandError

from recovery.selectors import QueryError, uncertain_calls_export


class Command(BaseCommand):
    help = "List uncertain tool calls (open, reconciling, escalated; --state all for every state)."

    def add_arguments(self, parser):
        parser.add_argument("--json", action="store_true", help="print a JSON array, one object per call")
        parser.add_argument("--state", action="append", help="open, reconciling, escalated, resolved, in_flight or all (repeatable)")

    def handle(self, *args, **options):
        states = options["state"]
        state = None if not states else ("all" if "all" in states else states)
        try:
            calls = uncertain_calls_export(state=state)
        except QueryError as exc:
            raise CommandError(str(exc)) from None
        if options["json"]:
            self.stdout.write(json.dumps(calls, indent=2, ensure_ascii=False))
            return
        if not calls:
            self.stdout.write("no uncertain calls")
        for c in calls:
            dup = "  POSSIBLE DUPLICATE" if c["possible_duplicate"] else ""
            self.stdout.write(
                f"{c['state']:<11} {c['risk_class']:<12} {c['run_id']}#{c['start_seq']} {c['tool']} key {c['idempotency_key']} "
                f"started {c['started_at']} deadline {c['deadline']}{dup}"
            )
