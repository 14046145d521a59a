from pathlib import Path

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError

from evidence.bundles import Problem, evidence_build, evidence_write
from access.tokens import Principal
from runs.errors import RunNotFound


class Command(BaseCommand):
    help = "Write a run's evidence bundle into DIR, masked unless --unmasked (docs/evidence.md)."

    def add_arguments(self, parser):
        parser.add_argument("run_id", metavar="RUN_ID")
        parser.add_argument("--out", metavar="DIR", required=True)
        parser.add_argument("--unmasked", action="store_true", help="sensitive values in full, with their salts (recorded as an access)")
        parser.add_argument("--by", default="manage.py", help="who exports, for the manifest and the access record (default: manage.py)")
        parser.add_argument("--reason", default="", help="why, for the access record of an unmasked bundle")

    def handle(self, *args, run_id, out, unmasked, by, reason, **options):
        who = Principal(kind="user", name=by[:200], owner="user:", scopes=frozenset())
        try:
            files, result = evidence_build(run_id=run_id, masked=not unmasked, who=who, why=reason or "manage.py export_evidence --unmasked")
            evidence_write(files=files, out=Path(out))
        except (RunNotFound, ValueError, ImproperlyConfigured, Problem) as exc:
            raise CommandError(str(exc)) from None
        except OSError as exc:
            raise CommandError(f"--out {out}: {exc.strerror}") from None
        self.stdout.write(result)
