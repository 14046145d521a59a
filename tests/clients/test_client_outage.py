"""The agent client through a database outage: gunicorn in front of a PostgreSQL cluster of the
test's own, stopped for a few seconds while an agent streams appends, then started again."""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time

import pytest
from reckon_client import ClientError, HttpTransport, open_run

from tests.api.live import PYTHON, ROOT, Server, child_env, free_port

BINS = sorted(glob.glob("/usr/lib/postgresql/*/bin"))
pytestmark = pytest.mark.skipif(not BINS or not shutil.which("runuser"), reason="PostgreSQL server binaries (initdb, pg_ctl) or runuser not found")


def _pg(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    cmd = [os.path.join(BINS[-1], args[0]), *args[1:]]
    if os.geteuid() == 0:
        cmd = ["runuser", "-u", "postgres", "--", *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, check=check, timeout=60)


@pytest.fixture
def own_cluster():
    base = tempfile.mkdtemp(prefix="reckon-pg-")
    data, port = os.path.join(base, "data"), free_port()
    if os.geteuid() == 0:
        shutil.chown(base, "postgres", "postgres")
    _pg("initdb", "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8")
    opts = f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c fsync=off"
    start = lambda: _pg("pg_ctl", "-D", data, "-o", opts, "-w", "-l", os.path.join(base, "log"), "start")  # noqa: E731
    start()
    try:
        yield {"url": f"postgres://postgres@127.0.0.1:{port}/postgres", "start": start, "stop": lambda: _pg("pg_ctl", "-D", data, "-m", "fast", "-w", "stop")}
    finally:
        _pg("pg_ctl", "-D", data, "-m", "immediate", "-w", "stop", check=False)
        shutil.rmtree(base, ignore_errors=True)


def _manage(url: str, *args: str) -> str:
    return subprocess.run([PYTHON, "manage.py", *args], cwd=ROOT, env=child_env(DATABASE_URL=url), capture_output=True, text=True, check=True, timeout=120).stdout


def test_an_agent_streaming_through_a_database_outage_loses_no_acknowledged_event(own_cluster):
    url = own_cluster["url"]
    _manage(url, "migrate", "--noinput")
    secret = json.loads(_manage(url, "create_token", "outage agent", "--scope", "append", "--scope", "read", "--json"))["secret"]
    server = Server(workers=2, env={"DATABASE_URL": url})
    acked, failures = [], []
    try:
        transport = HttpTransport(server.url + "/api", secret, timeout=5)
        # The agent streams until it has had 20 events acknowledged after the database came back
        # (or 60 s have passed, which the assertions below then report).
        back_at: list[int] = []
        give_up = time.monotonic() + 60

        def agent():
            try:
                with open_run("run-outage", transport=transport, ttl=20) as run:
                    i = 0
                    while time.monotonic() < give_up and not (back_at and len(acked) >= back_at[0] + 20):
                        ev = run.append("user_message", content=f"m{i}")
                        acked.append((ev.seq, f"m{i}"))
                        i += 1
                    run.close(outcome="done", release=False)
            except ClientError as exc:  # the client's own error is an acceptable end, a raw one is not
                failures.append(exc)
            except BaseException as exc:
                failures.append(exc)

        t = threading.Thread(target=agent)
        t.start()
        while len(acked) < 20 and t.is_alive() and time.monotonic() < give_up:  # streaming before the outage
            time.sleep(0.05)
        before = len(acked)
        own_cluster["stop"]()
        time.sleep(4)  # the outage, which the client rides out by retrying
        own_cluster["start"]()
        back_at.append(len(acked))
        t.join(70)
        assert not t.is_alive()
        assert before > 0 and len(acked) > before, (before, len(acked), failures)
        assert all(isinstance(f, ClientError) for f in failures), failures
        logged = [(e.seq, e.payload.get("content")) for e in HttpTransport(server.url + "/api", secret).events("run-outage") if e.type == "user_message"]
        contents = [c for _, c in logged]
        for seq, content in acked:
            assert contents.count(content) == 1 and (seq, content) in logged, (seq, content)
    finally:
        server.stop()
