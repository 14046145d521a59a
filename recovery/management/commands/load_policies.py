"""``manage.py load_policies FILE [--by NAME]``: load tool policies (docs/recovery.md, Policies), all or nothing."""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from recovery.policies import PolicyError
from recovery.policy_changes import policies_load


class Command(BaseCommand):
    help = "Load tool recovery policies from a TOML file; every change is recorded with who and when."

    def add_arguments(self, parser):
        parser.add_argument("file")
        parser.add_argument("--by", default="policy-file", help="who is loading them (recorded in the policy history)")

    def handle(self, *args, file, by, **options):
        try:
            text = Path(file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(f"{file}: cannot be read: {getattr(exc, 'strerror', None) or exc}") from None
        try:
            outcomes = policies_load(text=text, by=by)
        except PolicyError as exc:
            raise CommandError(f"{file}: {exc}; nothing was loaded") from None
        for tool, outcome in outcomes.items():
            self.stdout.write(f"{tool}: {outcome}")
