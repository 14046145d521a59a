"""``manage.py demo``, the quickstart, as a person runs it on a bare machine: the embedded default
(SQLite and in-process tasks) in a folder of its own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_demo_sets_up_and_prints_each_password_once_with_no_log_lines_between(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "RECKON_LOG_LEVEL", "DJANGO_SETTINGS_MODULE")}
    env.update(RECKON_VAR_DIR=str(tmp_path), PROMETHEUS_MULTIPROC_DIR="")
    done = subprocess.run([sys.executable, "manage.py", "demo", "--no-serve"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout.splitlines()
    assert "users (passwords are shown once; keep them now):" in out
    users = [line.split() for line in out if line.startswith("  ") and line.split()[0] in ("oncall", "compliance", "manager", "admin")]
    assert [u[0] for u in users] == ["oncall", "compliance", "manager", "admin"] and all(len(u[1]) >= 12 for u in users)
    assert any(line.startswith("detected ") and "attempted" in line for line in out), out
    # The set-up's recovery decisions (a JSON line each at INFO) stay out of the person's way.
    assert not [line for line in (done.stdout + done.stderr).splitlines() if line.startswith('{"ts"')]
    assert (tmp_path / "reckon.sqlite3").exists()
