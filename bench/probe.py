"""One measurement in a process of its own, for ``bench scale``: its peak resident set size is then
the measured work's alone (plus Django's start-up, reported as ``baseline_rss_mb``).

    python -m bench.probe import PATH          # manage.py import_runs' own code path
    python -m bench.probe replay RUN_ID STATE  # a full replay; writes the folded state to STATE
    python -m bench.probe state STATE          # the folded state alone: RSS before and after loading it
    python -m bench.probe export RUN_ID        # the console's JSONL export, streamed and discarded

Each prints one JSON object. The database comes from DATABASE_URL as usual.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _peak_mb() -> float:
    # VmHWM, this process's own high-water mark: getrusage's ru_maxrss keeps the parent's across
    # fork and exec, so a probe started by a large process would report that process's peak.
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def main(argv: list[str]) -> dict:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reckon.settings")
    django.setup()
    from django.conf import settings

    settings.DEBUG = False
    kind, args = argv[0], argv[1:]
    base = _rss_mb()
    start = resource.getrusage(resource.RUSAGE_SELF)
    cpu0 = start.ru_utime + start.ru_stime
    out: dict = {"probe": kind, "baseline_rss_mb": round(base, 1)}
    t0 = time.perf_counter()
    if kind == "import":
        from runs.importer import paths_import

        [result] = paths_import([args[0]])
        if result.outcome != "imported":
            raise SystemExit(result.line())
        out["events"] = result.appended
    elif kind == "replay":
        from runs.selectors import run_state
        from runs.snapshot_format import state_dumps

        st = run_state(run_id=args[0])
        out["events"] = st.last_seq
        out["seconds"] = time.perf_counter() - t0
        with open(args[1], "w") as f:
            f.write(state_dumps(st))
    elif kind == "state":
        from runs.snapshot_format import state_loads

        with open(args[0]) as f:
            body = f.read()
        before = _rss_mb()
        st = state_loads(body)
        del body
        out["state_mb"] = round(_rss_mb() - before, 1)
        out["completed_calls"] = len(st.completed_calls)
    elif kind == "export":
        from django.contrib.auth.models import User
        from django.test import Client

        admin = User.objects.filter(username="bench-probe").first() or User.objects.create_superuser("bench-probe", password=None)
        client = Client()
        client.force_login(admin)
        t0 = time.perf_counter()
        resp = client.get(f"/runs/{args[0]}/export.jsonl")
        pieces = iter(resp.streaming_content)
        size = len(next(pieces))
        out["first_byte_ms"] = round((time.perf_counter() - t0) * 1000, 1)
        for piece in pieces:
            size += len(piece)
        out["bytes"] = size
        out["events"] = int(resp["X-Reckon-Upto"])
    else:
        raise SystemExit(f"unknown probe {kind!r}: import, replay, state or export")
    out.setdefault("seconds", time.perf_counter() - t0)
    out["seconds"] = round(out["seconds"], 3)
    if "events" in out and kind != "state":
        out["events_per_s"] = round(out["events"] / out["seconds"])
    out["peak_rss_mb"] = round(_peak_mb(), 1)
    # The process's own CPU seconds: on a shared machine, the rate it would reach with a core to itself.
    usage = resource.getrusage(resource.RUSAGE_SELF)
    out["cpu_seconds"] = round(usage.ru_utime + usage.ru_stime - cpu0, 3)
    if "events" in out and kind != "state" and out["cpu_seconds"] > 0:
        out["events_per_cpu_s"] = round(out["events"] / out["cpu_seconds"])
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])))
