"""The benchmarks are not part of production: not in its INSTALLED_APPS, not in the wheel. They are
installed where they run: ``manage.py bench`` installs its own app, and so does the test session."""

import os
import subprocess
import sys
import tomllib
from pathlib import Path

from setuptools import find_packages

ROOT = Path(__file__).resolve().parents[2]


def _without_bench(tmp_path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "RECKON_BENCH"}
    return {**env, "RECKON_VAR_DIR": str(tmp_path), "DATABASE_URL": "", "DJANGO_SETTINGS_MODULE": "reckon.settings"}


def test_production_settings_leave_the_benchmarks_out_and_check_passes_without_them(tmp_path):
    env = _without_bench(tmp_path)
    code = "import django; django.setup(); from django.conf import settings; print('bench' in settings.INSTALLED_APPS)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert (out.returncode, out.stdout) == (0, "False\n"), out.stderr[-2000:]
    check = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stderr[-2000:]
    listed = subprocess.run([sys.executable, "manage.py", "help", "--commands"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0 and "bench" not in listed.stdout.split()


def test_manage_py_bench_installs_the_benchmarks_app_for_itself(tmp_path):
    out = subprocess.run([sys.executable, "manage.py", "bench", "--help"], cwd=ROOT, env=_without_bench(tmp_path), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "peers" in out.stdout and "store" in out.stdout


def test_the_wheel_holds_the_apps_and_not_the_benchmarks():
    found = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["packages"]["find"]
    packages = set(find_packages(where=str(ROOT), include=found["include"], exclude=found.get("exclude", ())))
    assert {"reckon", "runs", "api", "console"} <= packages
    assert not {p for p in packages if p == "bench" or p.startswith("bench.")}
