import json
import sys

from django.core.management.base import BaseCommand

from runs.importer import paths_import


class Command(BaseCommand):
    help = "Import run logs (files or folders of <run_id>.jsonl, docs/formats.md), all-or-nothing per file."

    def add_arguments(self, parser):
        parser.add_argument("paths", nargs="+", metavar="PATH")
        parser.add_argument("--json", action="store_true", help="print one JSON array of per-file results")

    def handle(self, *args, **options):
        results = paths_import(options["paths"])
        if options["json"]:
            self.stdout.write(json.dumps([r.as_dict() for r in results], indent=2))
        else:
            for r in results:
                self.stdout.write(r.line())
        rejected = sum(r.outcome == "rejected" for r in results)
        if rejected:
            self.stderr.write(f"{rejected} of {len(results)} files rejected")
            sys.exit(1)
