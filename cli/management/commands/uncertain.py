"""``manage.py uncertain [--json] [--state S]``: the uncertain calls, most dangerous first (docs/formats.md)."""

import json

from django.core.management.base import BaseCommand, CommandError

from access.models import AccessRecord
from access.services import Shown, command_principal, unmasked_reads_record
from recovery.selectors import QueryError, uncertain_calls_export


class Command(BaseCommand):
    help = "List uncertain tool calls (open, reconciling, escalated; --state all for every state). The JSON holds arguments unmasked and is recorded in the access record."

    def add_arguments(self, parser):
        parser.add_argument("--json", action="store_true", help="print a JSON array, one object per call (recorded as an access, one record per run, when it shows sensitive values)")
        parser.add_argument("--state", action="append", help="open, reconciling, escalated, resolved, in_flight or all (repeatable)")
        parser.add_argument("--by", default="", help="who reads, for the access record (default: the operating system's user)")

    def handle(self, *args, **options):
        states = options["state"]
        state = None if not states else ("all" if "all" in states else states)
        try:
            calls = uncertain_calls_export(state=state)
        except QueryError as exc:
            raise CommandError(str(exc)) from None
        if options["json"]:
            # One record per run whose calls are printed with sensitive values, written before printing.
            by_run: dict[str, list[dict]] = {}
            for c in calls:
                by_run.setdefault(c["run_id"], []).append(c)
            route = "manage.py uncertain --json" + "".join(f" --state {s}" for s in states or ())
            unmasked_reads_record(
                who=command_principal(options["by"]), mask=frozenset(), route=route, shown=[Shown(run_id=r, value=cs) for r, cs in by_run.items()], front_end=AccessRecord.FrontEnd.COMMAND
            )
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
