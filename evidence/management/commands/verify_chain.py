import json
import sys

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError

from access.chain import access_chain_verify
from runs.chain import ChainProblem, chain_verify
from runs.models import Run
from evidence.signing import checkpoint_check_signature


class Command(BaseCommand):
    help = "Recompute each run's hash chain from its stored events, and the chain of its access records; non-zero naming run, seq and what broke (docs/evidence.md)."

    def add_arguments(self, parser):
        parser.add_argument("run_ids", nargs="*", metavar="RUN_ID", help="the runs to check (default: every run)")
        parser.add_argument("--checkpoint", metavar="FILE", help="a signed checkpoint: also report runs rolled back or deleted since it was written")
        parser.add_argument("--json", action="store_true", help="one JSON object per run")

    def handle(self, *args, run_ids, checkpoint, **options):
        marks: dict[str, dict] = {}
        if checkpoint:
            try:
                with open(checkpoint, encoding="utf-8") as f:
                    doc = json.load(f)
            except (OSError, ValueError) as exc:
                raise CommandError(f"--checkpoint {checkpoint}: cannot be read as JSON: {exc}") from None
            try:
                why = checkpoint_check_signature(doc=doc)
            except ImproperlyConfigured as exc:
                raise CommandError(str(exc)) from None
            if why:
                raise CommandError(f"--checkpoint {checkpoint}: {why}")
            marks = {r["run_id"]: r for r in doc["runs"]}
            if not options["json"]:
                self.stdout.write(f"checkpoint {checkpoint}: written at {doc.get('written_at')}, signed by {doc['key_fingerprint']}, {len(marks)} runs")
        ids = list(run_ids) or sorted(set(Run.objects.values_list("run_id", flat=True)) | set(marks))
        failed = 0
        for run_id in ids:
            mark = marks.get(run_id)
            at = {mark["last_seq"]: None} if mark is not None and isinstance(mark.get("last_seq"), int) else None
            problem, last, head = chain_verify(run_id=run_id, hashes_at=at)
            if problem is None and mark is not None:
                problem = _against_checkpoint(run_id, mark, last, (at or {}).get(mark["last_seq"]))
            if problem is None:
                # Who was shown the run's sensitive values: chained the same way (access.chain).
                aproblem, acount, ahead = access_chain_verify(run_id=run_id)
                if aproblem is not None:
                    problem = ChainProblem(run_id, None, f"access {aproblem.kind}", f"access record {aproblem.n}: {aproblem.detail}" if aproblem.n else aproblem.detail)
                elif mark is not None and "access_count" in mark:
                    problem = _access_against_checkpoint(run_id, mark, acount, ahead)
            if problem is not None and problem.kind == "run deleted" and mark is not None:
                problem = ChainProblem(run_id, None, "run deleted", f"the checkpoint holds it at seq {mark['last_seq']}, the database has no such run")
            failed += problem is not None
            if options["json"]:
                out = {"run_id": run_id, "ok": problem is None, "last_seq": last, "head": head.hex() if head else None}
                if problem is not None:
                    out.update(problem.as_dict())
                sys.stdout.write(json.dumps(out) + "\n")
            elif problem is not None:
                self.stdout.write(problem.line())
            else:
                self.stdout.write(f"run {run_id}: ok, seq 1..{last} head {head.hex() if head else '-'}")
        if failed:
            raise CommandError(f"{failed} of {len(ids)} runs failed the chain check")


def _against_checkpoint(run_id: str, mark: dict, last: int, then: bytes | None) -> ChainProblem | None:
    """The run against the checkpoint's entry: its history must reach the checkpoint's seq, and
    the hash recomputed there (``then``) must be the checkpoint's head. A run that went on after
    the checkpoint is compared at the checkpoint's seq too, so history rewritten before it is named
    even when every hash after it was rewritten to match."""
    seq = mark["last_seq"]
    if last < seq:
        return ChainProblem(run_id, last, "rolled back", f"the checkpoint holds it at seq {seq} head {mark['head']}, the database at seq {last}")
    if seq > 0 and (then.hex() if then else None) != mark["head"]:
        return ChainProblem(run_id, seq, "head differs from checkpoint", f"the checkpoint's head at seq {seq} is {mark['head']}, the recomputed {then.hex() if then else None}")
    return None


def _access_against_checkpoint(run_id: str, mark: dict, count: int, head: bytes | None) -> ChainProblem | None:
    if count < mark["access_count"]:
        return ChainProblem(run_id, None, "access rolled back", f"the checkpoint holds {mark['access_count']} access records, the database {count}")
    if count == mark["access_count"] and (head.hex() if head else None) != mark["access_head"]:
        return ChainProblem(run_id, None, "access head differs from checkpoint", f"the checkpoint's access head at {count} records is {mark['access_head']}")
    return None
