"""``bench.probe``'s memory reading: a child's memory is counted with its parent's, once."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Run in a process of its own, so that no other child of the test runner is in its tree: it starts
# a child holding 50 MB, reads its own Pss, the child's and the tree's, then again once the child
# has ended.
_MEASURE = """
import json, os, subprocess, sys
from bench.probe import _tree_pss_kb

def pss(pid):
    with open(f"/proc/{pid}/smaps_rollup") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("Pss:"))

child = subprocess.Popen([sys.executable, "-c", "import time; b = bytearray(50 * 2**20); b[::4096] = b'x' * len(b[::4096]); print('ok', flush=True); time.sleep(30)"], stdout=subprocess.PIPE)
assert child.stdout.readline().strip() == b"ok"
me = os.getpid()
out = {"tree": _tree_pss_kb(me), "own": pss(me), "child": pss(child.pid)}
child.kill()
child.wait()
out["tree_after"], out["own_after"] = _tree_pss_kb(me), pss(me)
print(json.dumps(out))
"""


def test_the_tree_counts_a_childs_own_memory_beside_the_parents():
    done = subprocess.run([sys.executable, "-c", _MEASURE], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    kb = json.loads(done.stdout)
    assert kb["child"] >= 50 * 1024
    # Everything of the child is in the tree's figure, within what moves between two readings.
    assert kb["tree"] >= kb["own"] + kb["child"] - 2048
    # An ended child is gone from it: the tree is the process alone again.
    assert kb["tree_after"] <= kb["own_after"] + 2048
