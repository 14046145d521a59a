"""``manage.py bench`` suites run end to end and prints the figures the issue names.

Not a timed test: it asserts the command works and reports every figure as a positive number, on
whichever engine the suite runs on, in a throwaway database of its own.
"""

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bench_json(tmp_path, suite: str, *keys: str) -> dict:
    """``manage.py bench SUITE --quick --json`` in a throwaway database: its figures, each of
    ``keys`` a positive number."""
    env = {**os.environ, "RECKON_VAR_DIR": str(tmp_path), "TEST_DATABASE_NAME": f"test_bench_{suite}_{uuid.uuid4().hex[:8]}"}
    done = subprocess.run([sys.executable, "manage.py", "bench", suite, "--quick", "--json"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    figures = json.loads(done.stdout)
    for key in keys:
        assert isinstance(figures[key], (int, float)) and figures[key] > 0, key
    return figures


def test_bench_store_prints_every_figure_as_json(tmp_path):
    figures = _bench_json(tmp_path, "store", "raw_insert_per_s", "fenced_append_per_s", "fenced_batch_per_s", "replay_4k_ms", "fold_us_per_event")
    assert any(k.startswith("replay_") and k.endswith("k_ms") and k != "replay_4k_ms" for k in figures)


@pytest.mark.postgres
def test_bench_invoke_prints_its_figures_and_each_rounds_ratio_as_json(tmp_path):
    figures = _bench_json(tmp_path, "invoke", "raw_insert_per_s", "in_process_calls_per_s", "target_calls_per_s", "in_process_vs_target", "http_calls_per_s")
    rounds = figures["in_process_vs_target_rounds"]
    assert len(rounds) == 3 and all(r > 0 for r in rounds)
    assert sorted(rounds)[1] == figures["in_process_vs_target"]  # the verdict is the rounds' median
    assert figures["round_trips_per_call"] == 2.0


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)  # the whole screen's three tables are read from three threads
def test_bench_console_times_the_reports_over_a_settled_90_days(monkeypatch):
    """The last step of ``bench console`` on a small load (the whole command takes a minute): the
    bench's calls settled over 90 days, then the page, its three tables and the whole screen timed."""
    from django.contrib.auth.models import User
    from django.test import Client
    from django.utils import timezone

    from access.roles import roles_ensure
    from bench import console

    monkeypatch.setattr(console, "REPORT_REQUESTS", 3)
    now = timezone.now()
    console._load_pg(40, 500, 10, now)  # 400 open calls, as bench console loads them
    roles_ensure()
    admin = User.objects.create_superuser("bench-admin", password=None)
    client = Client()
    client.force_login(admin)
    settled = console._reports_resolved(client, admin, now)
    # The bench's own calls, 999 in 1,000 resolved, one in 20 of those after their deadline.
    assert settled["calls"] == 400 and settled["resolved"] == 400 - 400 // 1000
    assert settled["late"] == pytest.approx(settled["resolved"] / 20, rel=0.1)
    for name in ("page", "times_by_risk", "times_by_tool", "people", "whole_screen"):
        for key in ("p50_ms", "p95_ms"):
            assert isinstance(settled[name][key], (int, float)) and settled[name][key] > 0, (name, key)
    # What the screen then shows: every call in the 90 days, resolved but one in 1,000.
    page = client.get("/reports/times-by-risk/?days=90", headers={"HX-Request": "true"}).content.decode()
    assert page.count("<tr>") == 1 + 4  # the header and the four risk classes
