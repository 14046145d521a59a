"""``manage.py verify_snapshots [--sample N]``: full-replay equivalence, the release gate of snapshots."""

import json

from django.core.management.base import BaseCommand, CommandError

from runs.snapshot_verify import runs_with_snapshots, snapshot_verify


def _sample(text):
    try:
        value = int(text)
    except ValueError:
        raise CommandError(f"--sample must be a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise CommandError(f"--sample must be a whole number >= 1, got {text!r}")
    return value


class Command(BaseCommand):
    help = (
        "For each sampled run with a snapshot, fold the state from the snapshot plus its tail and from the full log, "
        "and compare every durable field. A difference counts as full_replay_equivalence_failures, quarantines that "
        "snapshot version and exits non-zero."
    )

    def add_arguments(self, parser):
        parser.add_argument("--sample", metavar="N", help="verify a random sample of N runs (default: every run with a snapshot)")
        parser.add_argument("--json", action="store_true", help="print one JSON object per run in an array")

    def handle(self, *args, **options):
        sample = _sample(options["sample"]) if options["sample"] is not None else None
        results = [snapshot_verify(run_id=run_id) for run_id in runs_with_snapshots(sample=sample)]
        if options["json"]:
            self.stdout.write(json.dumps([r.as_dict() for r in results], indent=2))
        elif not results:
            self.stdout.write("no run has a snapshot: nothing to verify")
        else:
            for r in results:
                self.stdout.write(r.line())
        failures = [r for r in results if r.outcome == "mismatch"]
        if failures:
            raise CommandError(
                f"{len(failures)} of {len(results)} snapshots differ from a full replay; "
                f"quarantined fold version(s): {', '.join(sorted({r.version for r in failures}))}"
            )
