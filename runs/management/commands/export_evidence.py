from pathlib import Path

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError

from runs.errors import RunNotFound
from runs.evidence import evidence_export
from runs.verify import Problem


class Command(BaseCommand):
    help = "Write a run's evidence bundle into DIR (CONTRACTS section 9, docs/evidence.md)."

    def add_arguments(self, parser):
        parser.add_argument("run_id", metavar="RUN_ID")
        parser.add_argument("--out", metavar="DIR", required=True)
        parser.add_argument("--unmasked", action="store_true", help="sensitive values in full (required for now: masked bundles are not written yet)")
        parser.add_argument("--by", default="manage.py", help="who exports, for the manifest (default: manage.py)")

    def handle(self, *args, run_id, out, unmasked, by, **options):
        if not unmasked:
            raise CommandError("masked evidence bundles are not implemented yet: pass --unmasked for a bundle with sensitive values in full")
        try:
            self.stdout.write(evidence_export(run_id=run_id, out=Path(out), exported_by=by))
        except (RunNotFound, ValueError, ImproperlyConfigured, Problem) as exc:
            raise CommandError(str(exc)) from None
        except OSError as exc:
            raise CommandError(f"--out {out}: {exc.strerror}") from None
