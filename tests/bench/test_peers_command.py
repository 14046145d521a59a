"""``manage.py bench peers`` runs end to end with tiny sizes and prints the five ratios beside their
floors; without PostgreSQL it says so in one line. Not a timed test: whether a floor holds is the
benchmark's figure (docs/benchmarks.md), not the suite's."""

import importlib.util
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from bench.peers import FLOORS

ROOT = Path(__file__).resolve().parents[2]
PEERS_INSTALLED = all(importlib.util.find_spec(m) for m in ("eventsourcing", "dbos"))


def _bench_peers(tmp_path, *args: str, **env: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "RECKON_VAR_DIR": str(tmp_path), "TEST_DATABASE_NAME": f"test_bench_peers_{uuid.uuid4().hex[:8]}", **env}
    return subprocess.run([sys.executable, "manage.py", "bench", "peers", "--quick", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.postgres
@pytest.mark.skipif(not PEERS_INSTALLED, reason="needs the peers extra: pip install -e '.[peers]'")
def test_bench_peers_prints_the_five_ratios_beside_their_floors(tmp_path):
    done = _bench_peers(tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line for line in done.stdout.splitlines() if " vs " in line]
    assert len(rows) == len(FLOORS) == 5
    for row, (_key, what, peer, floor) in zip(rows, FLOORS):
        assert what.split(",")[0].split(" {")[0] in row and peer in row
        assert f">={floor:.2f}x" in row and (" yes " in row or " NO " in row)


@pytest.mark.postgres
@pytest.mark.skipif(not PEERS_INSTALLED, reason="needs the peers extra: pip install -e '.[peers]'")
def test_bench_peers_json_gives_each_ratio_as_the_median_of_its_rounds(tmp_path):
    done = _bench_peers(tmp_path, "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    figures = json.loads(done.stdout)
    for key, *_ in FLOORS:
        rounds = figures[f"{key}_rounds"]
        assert len(rounds) == 3 and all(r > 0 for r in rounds), key
        assert sorted(rounds)[1] == figures[key], key


def test_bench_peers_on_sqlite_says_it_needs_postgresql_without_a_traceback(tmp_path):
    done = _bench_peers(tmp_path, DATABASE_URL="")
    assert done.returncode == 1
    assert "bench peers needs PostgreSQL" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.postgres
def test_bench_peers_without_the_extra_says_how_to_install_it_without_a_traceback(tmp_path):
    # The peers made unimportable in the command's process, as in an environment without the extra.
    env = {**os.environ, "RECKON_VAR_DIR": str(tmp_path), "TEST_DATABASE_NAME": f"test_bench_peers_{uuid.uuid4().hex[:8]}"}
    code = "import sys; sys.modules['dbos'] = None; sys.argv = ['manage.py', 'bench', 'peers', '--quick']; import manage; manage.main()"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 1
    assert "bench peers needs the peers extra (dbos is missing): pip install -e '.[peers]'" in done.stderr and "Traceback" not in done.stderr
