"""Failures outside the domain still answer in the API's JSON shape: a body over the size limit is
a 413, a database that is down is a 503 with Retry-After, never Django's HTML pages."""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import tempfile
import urllib.error
import urllib.request

import pytest

from tests.api.live import Server, free_port


def test_an_oversized_body_is_a_413_in_the_json_shape(agent, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    r = agent.post("/api/runs/run-big/lease", {"holder": "x" * 2000, "ttl_s": 30})
    assert r.status_code == 413, r.content
    doc = r.json()
    assert doc["code"] == "too_large" and "larger than 1000 bytes (DATA_UPLOAD_MAX_MEMORY_SIZE)" in doc["detail"]


def test_an_html_error_under_api_becomes_json(client, settings):
    settings.DEBUG = False
    r = client.post("/api/runs/x/lease", "{}", content_type="application/json", HTTP_HOST="not-allowed.example")
    assert r.status_code == 400 and r["Content-Type"] == "application/json"
    assert r.json()["code"] == "bad_request"


def _pg_bin() -> str | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return os.path.dirname(found[-1]) if found else None


def _as_postgres(*cmd: str) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else list(cmd)


@pytest.mark.skipif(_pg_bin() is None, reason="PostgreSQL's initdb/pg_ctl are not installed")
def test_a_database_that_is_down_is_a_503_with_retry_after():
    bindir, port = _pg_bin(), free_port()
    data = tempfile.mkdtemp(prefix="reckon-pg-down-")
    if os.geteuid() == 0:
        shutil.chown(data, "postgres", "postgres")
    pgdata = os.path.join(data, "db")
    server = None
    try:
        subprocess.run(_as_postgres(f"{bindir}/initdb", "-D", pgdata, "-U", "postgres", "--auth=trust", "-N"), check=True, capture_output=True, timeout=60)
        opts = f"-p {port} -k {data} -c listen_addresses=127.0.0.1 -c fsync=off"
        subprocess.run(_as_postgres(f"{bindir}/pg_ctl", "-D", pgdata, "-o", opts, "-w", "-l", os.path.join(data, "log"), "start"), check=True, capture_output=True, timeout=30)
        server = Server(workers=1, env={"DATABASE_URL": f"postgres://postgres@127.0.0.1:{port}/postgres", "DEBUG": "false", "SECRET_KEY": "x" * 60})
        subprocess.run(_as_postgres(f"{bindir}/pg_ctl", "-D", pgdata, "-m", "immediate", "-w", "stop"), check=True, capture_output=True, timeout=30)
        request = urllib.request.Request(f"{server.url}/api/runs", headers={"Authorization": "Bearer rk_not_a_real_token"})
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(request, timeout=10)
        answer = caught.value
        assert answer.code == 503 and answer.headers["Content-Type"].startswith("application/json")
        assert answer.headers["Retry-After"] == "5"
        assert json.loads(answer.read()) == {"detail": "the database is unavailable; try again shortly", "code": "unavailable"}
    finally:
        if server:
            server.stop()
        subprocess.run(_as_postgres(f"{bindir}/pg_ctl", "-D", pgdata, "-m", "immediate", "stop"), capture_output=True, timeout=30)
        shutil.rmtree(data, ignore_errors=True)
