"""``manage.py load_notifications FILE [--by NAME] [--dry-run]``: load notification channels and
routes, all or nothing, saying what changes."""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from notify.config import NotifyConfigError, notifications_load, notifications_preview


class Command(BaseCommand):
    help = (
        "Load notification channels and routes from a TOML file (replacing the current ones); prints what changed. "
        "A channel's secret left out of the file keeps the current one."
    )

    def add_arguments(self, parser):
        parser.add_argument("file")
        parser.add_argument("--by", default="notifications-file", help="who is loading them (recorded in the change history)")
        parser.add_argument("--dry-run", action="store_true", help="print what loading the file would change, and change nothing")

    def handle(self, *args, file, by, dry_run, **options):
        try:
            text = Path(file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(f"{file}: cannot be read: {getattr(exc, 'strerror', None) or exc}") from None
        try:
            lines = notifications_preview(text=text) if dry_run else notifications_load(text=text, by=by, source=str(file))
        except NotifyConfigError as exc:
            raise CommandError(f"{file}: {exc}; nothing was loaded") from None
        for line in lines:
            self.stdout.write(line)
        if dry_run:
            self.stdout.write("dry run: nothing was changed")
