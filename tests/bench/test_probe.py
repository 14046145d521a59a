"""``bench.probe``'s memory reading: a child's memory is counted with its parent's, once."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from bench.probe import _tree_pss_kb

FIFTY_MB = 50 * 2**20


def _pss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/smaps_rollup") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("Pss:"))


def test_the_tree_counts_a_childs_own_memory_beside_the_parents():
    child = subprocess.Popen([sys.executable, "-c", f"import sys, time; b = bytearray({FIFTY_MB}); b[::4096] = b'x' * len(b[::4096]); print('ok', flush=True); time.sleep(30)"], stdout=subprocess.PIPE)
    try:
        assert child.stdout.readline().strip() == b"ok"
        me = os.getpid()
        tree, own, theirs = _tree_pss_kb(me), _pss_kb(me), _pss_kb(child.pid)
        assert theirs >= FIFTY_MB // 1024
        # Everything of the child is in the tree's figure, within what moves between two readings.
        assert tree >= own + theirs - 2048
    finally:
        child.kill()
        child.wait()
    time.sleep(0.05)
    assert _tree_pss_kb(os.getpid()) < _pss_kb(os.getpid()) + FIFTY_MB // 1024 // 2  # the ended child is gone from it
