"""``manage.py rebuild_projections``: rebuild the uncertain-call projection and the recorded calls roll-up from the event log."""

import time

from django.core.management.base import BaseCommand

from recovery.rebuild import projections_rebuild


class Command(BaseCommand):
    help = "Rebuild the uncertain-call read model and the recorded calls roll-up from every run's events (one transaction)."

    def handle(self, *args, **options):
        t0 = time.perf_counter()
        result = projections_rebuild()
        self.stdout.write(f"rebuilt {result['rows']} uncertain-call rows and {result['recorded']} recorded-call rows in {time.perf_counter() - t0:.2f}s")
