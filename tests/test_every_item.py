"""The suite's guard against tests that are collected but never run (tests/every_item.py): pytest run
in a process of its own over a folder whose plugin gives four items one node id, as Schemathesis
does, on two xdist workers."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.helpers import ROOT

TWINS = '''
import pytest


class Twin(pytest.Item):
    def runtest(self):
        pass


class TwinFile(pytest.File):
    def collect(self):
        for _ in range(4):
            yield Twin.from_parent(self, name="same")


def pytest_collect_file(parent, file_path):
    if file_path.name == "twins.txt":
        return TwinFile.from_parent(parent, path=file_path)
'''


def _pytest(folder, dist: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    args = [sys.executable, "-m", "pytest", "-p", "xdist.plugin", "-p", "tests.every_item", "-p", "no:cacheprovider", "-n", "2", "--dist", dist, "-q"]
    return subprocess.run(args, cwd=folder, env=env, capture_output=True, text=True, timeout=120)


def test_a_run_that_drops_tests_sharing_a_node_id_fails_naming_how_many_and_one_that_runs_them_all_passes(tmp_path):
    (tmp_path / "conftest.py").write_text(TWINS)
    (tmp_path / "twins.txt").write_text("")
    (tmp_path / "test_plain.py").write_text("def test_a():\n    pass\n\n\ndef test_b():\n    pass\n")
    # Scheduling by scope keeps one of the four twins (its queue is keyed by node id): 3 of 6 run.
    dropped = _pytest(tmp_path, "loadgroup")
    assert "3 passed" in dropped.stdout, dropped.stdout + dropped.stderr
    assert dropped.returncode == 1, dropped.stdout
    assert "3 of 6 collected tests never ran (tests.every_item)" in dropped.stdout
    # Work stealing runs each of them: the guard says nothing.
    whole = _pytest(tmp_path, "worksteal")
    assert whole.returncode == 0 and "6 passed" in whole.stdout, whole.stdout + whole.stderr
    assert "never ran" not in whole.stdout
