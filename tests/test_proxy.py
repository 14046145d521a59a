"""The proxy production needs in front of gunicorn (deploy/nginx/reckon.conf, docs/operations.md):
behind it, slow and half-open clients cannot take gunicorn's threads.

gunicorn starts with the shipped settings (reckon.gunicorn_conf, gthread, 8 threads) on a free
port, Debian's nginx with the shipped server block on another. 30 clients then open connections and
stop half-way: half within their headers, half within a body they announced. Straight to gunicorn,
as few as 6 such connections made /healthz time out; through nginx, /healthz answers at once.
Skipped where nginx is not installed (apt-get install nginx-light)."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tests.api.live import PYTHON, ROOT, child_env, free_port

NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
SHIPPED = ROOT / "deploy" / "nginx" / "reckon.conf"
pytestmark = pytest.mark.skipif(NGINX is None, reason="nginx is absent (apt-get install nginx-light)")


def _wait_for(url: str, proc: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        try:
            urllib.request.urlopen(url, timeout=1).read()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not answer within 20 s")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _nginx_conf(tmp: Path, listen: int, upstream: int) -> Path:
    """The shipped server block with this test's ports, inside a main file that keeps nginx's pid,
    logs and buffers in ``tmp``."""
    site = SHIPPED.read_text(encoding="utf-8")
    site, n_up = re.subn(r"server 127\.0\.0\.1:8000;", f"server 127.0.0.1:{upstream};", site)
    site, n_listen = re.subn(r"listen 80;", f"listen 127.0.0.1:{listen};", site)
    assert n_up == n_listen == 1, "the shipped file's upstream or listen line changed: update this test"
    (tmp / "reckon.conf").write_text(site, encoding="utf-8")
    user = "user root;" if os.geteuid() == 0 else ""  # as root, workers would otherwise become nobody, who cannot write tmp
    main = tmp / "nginx.conf"
    main.write_text(
        f"""{user}
daemon off;
worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    include {tmp}/reckon.conf;
}}
""",
        encoding="utf-8",
    )
    return main


@pytest.fixture
def behind_nginx(tmp_path):
    """gunicorn with reckon.gunicorn_conf behind nginx with deploy/nginx/reckon.conf: nginx's URL."""
    web, front = free_port(), free_port()
    metrics = tmp_path / "prometheus"
    metrics.mkdir()
    gunicorn = subprocess.Popen(
        [PYTHON, "-m", "gunicorn", "-c", "python:reckon.gunicorn_conf", "reckon.wsgi:application"],
        cwd=ROOT,
        env=child_env(WEB_BIND=f"127.0.0.1:{web}", WEB_WORKERS="1", WEB_THREADS="8", PROMETHEUS_MULTIPROC_DIR=str(metrics)),
    )
    nginx = None
    try:
        _wait_for(f"http://127.0.0.1:{web}/healthz", gunicorn, "gunicorn")
        conf = _nginx_conf(tmp_path, front, web)
        nginx = subprocess.Popen([NGINX, "-c", str(conf), "-p", str(tmp_path), "-e", str(tmp_path / "error.log")], cwd=tmp_path)
        _wait_for(f"http://127.0.0.1:{front}/healthz", nginx, "nginx")
        yield f"http://127.0.0.1:{front}", front
    finally:
        if nginx is not None:
            _stop(nginx)
        _stop(gunicorn)


def test_thirty_half_open_clients_do_not_keep_healthz_from_answering_through_the_shipped_proxy(behind_nginx):
    url, port = behind_nginx
    slow: list[socket.socket] = []
    try:
        for i in range(30):
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            if i % 2:
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")  # headers never finished
            else:
                s.sendall(b"POST /api/runs/run-slow/lease HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 4000\r\n\r\n{\"holder\": ")  # a body never finished
            slow.append(s)
        time.sleep(0.3)  # let nginx take them all
        for _ in range(4):
            started = time.monotonic()
            with urllib.request.urlopen(f"{url}/healthz", timeout=5) as r:
                assert r.status == 200
            assert time.monotonic() - started < 1.0
    finally:
        for s in slow:
            s.close()
