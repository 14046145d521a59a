import json
import sys

from django.core.management.base import BaseCommand, CommandError

from access.models import AccessRecord
from access.services import Shown, command_principal, unmasked_reads_record
from runs.errors import RunNotFound
from runs.fold import FoldError
from runs.selectors import run_get, run_state


class Command(BaseCommand):
    help = "Fold a run's log and print its state (docs/formats.md). The JSON holds sensitive values unmasked and is recorded in the access record."

    def add_arguments(self, parser):
        parser.add_argument("run_id", metavar="RUN_ID")
        parser.add_argument("--at", type=int, metavar="SEQ", help="the state after this seq (default: the last event)")
        parser.add_argument("--json", action="store_true", help="print the folded state as JSON (recorded as an access when it shows sensitive values)")
        parser.add_argument("--by", default="", help="who reads, for the access record (default: the operating system's user)")

    def handle(self, *args, run_id, at, by, **options):
        try:
            run = run_get(run_id=run_id)
        except RunNotFound as exc:
            raise CommandError(str(exc)) from None
        if at is not None and not 1 <= at <= run.last_seq:
            raise CommandError(f"--at {at} is outside run {run_id!r}, whose events are seq 1..{run.last_seq}")
        try:
            state = run_state(run_id=run_id, at=at)
        except (FoldError, ValueError) as exc:
            raise CommandError(f"run {run_id!r} cannot be replayed: {exc}") from None
        doc = state.to_dict()
        if options["json"]:
            # Recorded before it is printed; if the record cannot be written nothing is printed.
            route = f"manage.py replay {run_id}" + (f" --at {at}" if at is not None else "") + " --json"
            unmasked_reads_record(who=command_principal(by), mask=frozenset(), route=route, shown=[Shown(run_id=run_id, value=doc)], front_end=AccessRecord.FrontEnd.COMMAND)
            json.dump(doc, sys.stdout, indent=2, ensure_ascii=False)
            sys.stdout.write("\n")
            return
        self.stdout.write(f"run {doc['run_id']} at seq {doc['last_seq']}: {doc['status']}")
        self.stdout.write(f"  turns {doc['turns']}, tokens in/out {doc['usage'].get('input_tokens', 0)}/{doc['usage'].get('output_tokens', 0)}, cost ${doc['cost_usd']:.4f}, compactions {doc['compactions']}")
        self.stdout.write(f"  {len(doc['messages'])} messages in context, {len(doc['completed_calls'])} completed calls")
        for c in doc["uncertain_calls"]:
            self.stdout.write(f"  uncertain: {c['name']} call {c['call_id']} key {c['idempotency_key']} started {c['started_at']} (seq {c['start_seq']})")
