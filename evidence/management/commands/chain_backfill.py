from django.core.management.base import BaseCommand

from access.chain import access_chain_backfill
from runs.chain import chain_backfill
from runs.models import Run


class Command(BaseCommand):
    help = "Chain the runs recorded before the hash chain existed (once, after upgrading; docs/evidence.md)."

    def handle(self, *args, **options):
        runs = list(Run.objects.filter(head=None, last_seq__gt=0).values_list("run_id", flat=True))
        written = 0
        for run_id in runs:
            written += chain_backfill(run_id=run_id)
        records = access_chain_backfill()
        self.stdout.write(f"chained {len(runs)} runs, {written} event hashes written, {records} access records chained")
