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
import threading
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


def _tree_pss_kb(pid: int) -> int:
    """The proportional set size of ``pid`` and every process below it, in kB (shared pages split
    between the processes that share them, so a forked child's inherited pages count once)."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/smaps_rollup") as f:
                total += next((int(line.split()[1]) for line in f if line.startswith("Pss:")), 0)
            for t in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{t}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue  # a process that ended meanwhile
    return total


class _TreeMemory:
    """The peak of ``_tree_pss_kb`` over this process and its children, sampled every 20 ms by a
    thread: an import reads and folds in child processes, whose memory is the import's too."""

    def __init__(self):
        self.peak_kb = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        me = os.getpid()
        while not self._stop.wait(0.02):
            self.peak_kb = max(self.peak_kb, _tree_pss_kb(me))

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.peak_kb / 1024


def main(argv: list[str]) -> dict:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reckon.settings")
    django.setup()
    from django.conf import settings

    settings.DEBUG = False
    kind, args = argv[0], argv[1:]
    base = _rss_mb()
    start, start_children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu0 = start.ru_utime + start.ru_stime
    cpu0_children = start_children.ru_utime + start_children.ru_stime
    tree = _TreeMemory()
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
    # The peak: this process's own high-water mark, or its children's and its own memory together
    # at their sampled peak, whichever is higher.
    out["own_peak_rss_mb"] = round(_peak_mb(), 1)
    out["tree_peak_pss_mb"] = round(tree.stop(), 1)
    out["peak_rss_mb"] = max(out["own_peak_rss_mb"], out["tree_peak_pss_mb"])
    # CPU seconds of this process and of its children (each joined before it returned): on a shared
    # machine, the rate the work would reach with the cores to itself.
    usage, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    out["own_cpu_seconds"] = round(usage.ru_utime + usage.ru_stime - cpu0, 3)
    out["cpu_seconds"] = round(out["own_cpu_seconds"] + children.ru_utime + children.ru_stime - cpu0_children, 3)
    if "events" in out and kind != "state" and out["cpu_seconds"] > 0:
        out["events_per_cpu_s"] = round(out["events"] / out["cpu_seconds"])
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])))
