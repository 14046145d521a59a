"""A zygote for client processes, run by a client environment's python (standard library only):
imports the third-party modules named on its command line once (a framework such as LangGraph or
Pydantic AI, or the MCP SDK: about a second of each process's start), then forks a new process for
every script asked of it (tests/clients/forked.py).

    python zygote.py FD MODULE...                 # agents, asked by the test
    python zygote.py --listen PATH FD MODULE...   # servers, asked by forked_exec.py

FD is one end of a Unix SEQPACKET socket held by the test. Each request is one message,
``{"argv", "env", "cwd"}``, with three file descriptors attached (the child's stdin, stdout and
stderr); the zygote answers ``{"pid": N}`` once the child is forked and ``{"exit": CODE}``
(negative: killed by that signal) once it is reaped. Without ``--listen`` the requests come on FD,
one child at a time. With it, FD only tells the zygote when to end (the test closes its end), and
the requests come on connections to the SEQPACKET socket it listens on at PATH, one request a
connection, any number at once: for each, a forked handler forks the child, answers on that
connection and waits for the child (tests/clients/forked_exec.py is the command that asks; an MCP
server started by reckon-mcp-proxy, say).

The child is a process of its own: its own pid (and so its own lease holder), its own stdio, the
environment and working directory it was given, ``sys.argv`` its script's; it runs the script as
``__main__`` (the client's package and the script are imported there, not in the zygote) and ends
the way a fresh interpreter running it would (``sys.exit``'s code, or 1 with the traceback on
stderr). The zygote starts no thread before forking; ``random`` is seeded again in each child.
"""

from __future__ import annotations

import importlib
import json
import os
import runpy
import select
import signal
import socket
import sys


def _fork_and_wait(conn: socket.socket) -> tuple[dict, list[int]] | None:
    """One request from ``conn``: fork its child, tell its pid, wait for it and tell how it ended.
    In the child, return its request and stdio; None when ``conn`` was closed instead."""
    msg, fds, _flags, _addr = socket.recv_fds(conn, 1 << 20, 3)
    if not msg:
        return None
    request = json.loads(msg)
    pid = os.fork()
    if pid == 0:
        return request, fds
    for fd in fds:
        os.close(fd)
    conn.send(json.dumps({"pid": pid}).encode())
    _, status = os.waitpid(pid, 0)
    conn.send(json.dumps({"exit": os.waitstatus_to_exitcode(status)}).encode())
    return {}, []


def serve(sock: socket.socket) -> tuple[dict, list[int]] | None:
    """Fork a child per request on ``sock``; in the child, return its request and stdio; None when
    the test closes its end."""
    while True:
        got = _fork_and_wait(sock)
        if got is None or got[0]:
            return got


def serve_listening(control: socket.socket, listener: socket.socket) -> tuple[dict, list[int]] | None:
    """Fork a handler per connection to ``listener`` (it forks the child and waits for it); in the
    child, return its request and stdio; None when the test closes ``control``."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the handlers are reaped as they end
    while True:
        ready = select.select([control, listener], [], [])[0]
        if control in ready:
            return None  # the test closed its end (it sends nothing else)
        conn, _ = listener.accept()
        if os.fork() != 0:
            conn.close()
            continue
        control.close()
        listener.close()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the handler waits for its child
        got = _fork_and_wait(conn)
        if got is None or not got[0]:
            os._exit(0)
        conn.close()
        return got


def main() -> int:
    args = sys.argv[1:]
    listen = args[1] if args[0] == "--listen" else None
    if listen:
        args = args[2:]
    sock = socket.socket(fileno=int(args[0]))
    for name in args[1:]:
        importlib.import_module(name)
    listener = None
    if listen:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        listener.bind(listen)
        listener.listen(16)
    sock.send(b'{"ready": true}')
    got = serve_listening(sock, listener) if listener else serve(sock)
    if got is None:
        os._exit(0)  # nothing to finish: not the second it takes to tear down what was imported
    request, fds = got
    sock.close()
    for target, fd in zip((0, 1, 2), fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = list(request["argv"])
    runpy.run_path(sys.argv[0], run_name="__main__")  # its sys.exit ends this process with its code
    return 0


if __name__ == "__main__":
    sys.exit(main())
