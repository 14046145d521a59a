"""``manage.py reconcile --once [--due-only] [--json]``: one reconciliation pass, synchronously."""

import json

from django.core.management.base import BaseCommand, CommandError

from recovery.reconcile import reconcile_pass


class Command(BaseCommand):
    help = "Run one reconciliation pass over every open uncertain call, in this process."

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", required=True, help="one pass, then exit (the only mode)")
        parser.add_argument("--due-only", action="store_true", help="skip calls still waiting out their backoff")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, **options):
        summary = reconcile_pass(due_only=options["due_only"])
        if options["json"]:
            self.stdout.write(json.dumps(summary))
        else:
            actions = ", ".join(f"{k} {v}" for k, v in sorted(summary["actions"].items())) or "none"
            self.stdout.write(
                f"detected {summary['detected']} newly uncertain; attempted {summary['acted']} (actions: {actions}); "
                f"skipped {summary['skipped']}, run busy {summary['busy']}, fenced {summary['fenced']}, errors {summary['errors']}"
            )
        if summary["errors"]:
            raise CommandError("; ".join(summary.get("error_detail", [])))
