"""``manage.py report_summary --notify CHANNEL [--notify ...] [--days 7]``: send the managers'
summary of the last days (docs/reports.md, "Summary") through the named notification channels.
Run it weekly (cron, or a beat entry); running it again for the same period sends nothing more."""

from django.core.management.base import BaseCommand, CommandError

from notify.summary import SummaryError, summary_write
from recovery.reports import PERIOD_DAYS


class Command(BaseCommand):
    help = "Send the reports' summary of the last 7 (30, 90) UTC days, beside the days before them, and the calls overdue now, through notification channels."

    def add_arguments(self, parser):
        parser.add_argument("--notify", action="append", default=[], metavar="CHANNEL", help="a channel's name (repeat for several)")
        parser.add_argument("--days", type=int, default=7, choices=PERIOD_DAYS, help="the period, in UTC days (default 7)")

    def handle(self, *args, notify, days, **options):
        try:
            ids = summary_write(channels=notify, days=days)
        except SummaryError as exc:
            raise CommandError(f"{exc}; nothing was sent") from None
        self.stdout.write(f"summary of the last {days} days: {len(ids)} notification(s) written for {', '.join(notify)}")
