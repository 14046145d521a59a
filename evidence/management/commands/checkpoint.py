from pathlib import Path

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError

from evidence.signing import checkpoint_write


class Command(BaseCommand):
    help = "Write a signed checkpoint of every run's last seq and chain head (docs/evidence.md)."

    def add_arguments(self, parser):
        parser.add_argument("--out", metavar="DIR", help="the folder (default RECKON_CHECKPOINT_DIR)")

    def handle(self, *args, out, **options):
        try:
            path = checkpoint_write(folder=Path(out) if out else None)
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from None
        except OSError as exc:
            raise CommandError(f"--out {out}: {exc.strerror}") from None
        self.stdout.write(str(path))
