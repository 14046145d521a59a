"""Agent processes forked from a zygote (zygote.py) that has already imported their framework, for
the tests that start many agents of one environment (tests/clients/test_framework_repeats.py, the
MCP proxy's tests): each agent is still a process of its own, with its own pid, stdio and
environment, that runs its script from the start and can be killed with SIGKILL; what it no longer
does is import LangGraph, Pydantic AI or the MCP SDK (about a second each), which the zygote did
once, in a fresh interpreter of the same environment. ``ForkedProcess`` answers like the parts of
``subprocess.Popen`` the tests use.

``ListeningZygote`` does the same for a process that another process starts (the counting MCP
server that reckon-mcp-proxy starts): its ``command`` is what that process runs
(forked_exec.py), and the script's process, forked from the zygote, gets that command's stdio."""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

ZYGOTE = Path(__file__).with_name("zygote.py")
FORKED_EXEC = Path(__file__).with_name("forked_exec.py")
START_S = 120


def _start_zygote(python: Path | str, options: list[str], modules: list[str], env: dict, **popen) -> tuple[socket.socket, subprocess.Popen]:
    """zygote.py started with ``options`` and ``modules`` imported, once it says it is ready; the
    test's end of its socket, and its process."""
    sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with theirs:
        proc = subprocess.Popen(
            [str(python), str(ZYGOTE), *options, str(theirs.fileno()), *modules],
            pass_fds=[theirs.fileno()],
            cwd="/",
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            **popen,
        )
    if select.select([sock], [], [], START_S)[0] and sock.recv(4096) == b'{"ready": true}':
        return sock, proc
    proc.kill()
    raise RuntimeError(f"the zygote did not start ({proc.wait()}): {proc.stderr.read()}")


class Zygote:
    """A client environment's ``python`` with ``modules`` imported, forking an agent per ``spawn``."""

    def __init__(self, python: Path | str, modules: list[str], env: dict):
        self.sock, self.proc = _start_zygote(python, [], modules, env)
        self.current: ForkedProcess | None = None

    def _receive(self, timeout: float | None) -> dict | None:
        """The zygote's next message; None if none comes within ``timeout`` (or it ended)."""
        if not select.select([self.sock], [], [], timeout)[0]:
            return None
        msg = self.sock.recv(4096)
        return json.loads(msg) if msg else None

    def spawn(self, argv: list[str], env: dict, cwd: str = "/") -> ForkedProcess:
        """``argv[0]`` (a script) run in a new process forked from the zygote."""
        if self.current is not None and self.current.poll() is None:  # a test that failed left it running
            self.current.kill()
            self.current.wait(30)
        stdin = os.open(os.devnull, os.O_RDONLY)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            socket.send_fds(self.sock, [json.dumps({"argv": [str(a) for a in argv], "env": env, "cwd": cwd}).encode()], [stdin, out_w, err_w])
        finally:
            for fd in (stdin, out_w, err_w):
                os.close(fd)
        forked = self._receive(30)
        if not forked or "pid" not in forked:
            raise RuntimeError(f"the zygote did not fork: {forked}")
        self.current = ForkedProcess(self, forked["pid"], argv, os.fdopen(out_r), os.fdopen(err_r))
        return self.current

    def stop(self) -> None:
        if self.current is not None and self.current.poll() is None:
            self.current.kill()
            self.current.wait(30)
        self.sock.close()  # the zygote's next read ends it
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stderr.close()


class ListeningZygote:
    """A client environment's ``python`` with ``modules`` imported, forking a process per
    ``command`` run by whoever runs it, any number at once. The zygote leads a process group of its
    own, with every process it forks: ``stop`` ends them all (what a failed test left running)."""

    def __init__(self, python: Path | str, modules: list[str], env: dict):
        self.python = python
        self.folder = tempfile.mkdtemp(prefix="reckon-zygote-")  # short: a socket's path is at most 107 bytes
        self.path = os.path.join(self.folder, "zygote.sock")
        self.sock, self.proc = _start_zygote(python, ["--listen", self.path], modules, env, start_new_session=True)

    def command(self, script: Path | str, *args: str) -> list[str]:
        """The command that runs ``script ARGS`` in a process forked from the zygote."""
        return [str(self.python), "-I", str(FORKED_EXEC), self.path, str(script), *(str(a) for a in args)]

    def stop(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # not reaped yet: the group is still the zygote's
        except ProcessLookupError:
            pass
        self.proc.wait()
        self.proc.stderr.close()
        self.sock.close()
        shutil.rmtree(self.folder, ignore_errors=True)


class ForkedProcess:
    """An agent forked by a ``Zygote``, with ``Popen``'s ``pid``, ``args``, ``stdout``, ``stderr``
    (text pipes), ``returncode``, ``poll``, ``wait``, ``communicate``, ``send_signal`` and ``kill``."""

    def __init__(self, zygote: Zygote, pid: int, argv: list[str], stdout, stderr):
        self.zygote, self.pid, self.args, self.stdout, self.stderr = zygote, pid, argv, stdout, stderr
        self.returncode: int | None = None
        self._read: dict[str, str] = {}
        self._readers: list[threading.Thread] = []

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            ended = self.zygote._receive(timeout)
            if ended is None:
                raise subprocess.TimeoutExpired(self.args, timeout)
            self.returncode = ended["exit"]
        return self.returncode

    def poll(self) -> int | None:
        try:
            return self.wait(0)
        except subprocess.TimeoutExpired:
            return None

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:  # not reaped yet: the pid is still this process's
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """Read stdout and stderr to their ends (both at once, so neither pipe fills) and wait."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._readers:
            for name, f in (("out", self.stdout), ("err", self.stderr)):
                self._readers.append(threading.Thread(target=lambda n=name, f=f: self._read.__setitem__(n, f.read()), daemon=True))
                self._readers[-1].start()
        for t in self._readers:
            t.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if t.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout)
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        self.stdout.close()
        self.stderr.close()
        return self._read["out"], self._read["err"]
