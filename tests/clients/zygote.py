"""A zygote for agent processes, run by a client environment's python (standard library only):
imports the third-party modules named on its command line once (a framework such as LangGraph or
Pydantic AI, or the MCP SDK: about a second of each agent process's start), then forks a new
process for every script the test asks for (tests/clients/forked.py).

    python zygote.py FD MODULE...

FD is one end of a Unix SEQPACKET socket. Each request is one message, ``{"argv", "env", "cwd"}``,
with three file descriptors attached (the child's stdin, stdout and stderr); the zygote answers
``{"pid": N}`` once the child is forked and ``{"exit": CODE}`` (negative: killed by that signal)
once it is reaped. One child at a time.

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
import socket
import sys


def serve(sock: socket.socket) -> tuple[dict, list[int]] | None:
    """Fork a child per request; in the child, return its request and stdio; None when the test
    closes its end."""
    while True:
        msg, fds, _flags, _addr = socket.recv_fds(sock, 1 << 20, 3)
        if not msg:
            return None
        request = json.loads(msg)
        pid = os.fork()
        if pid == 0:
            return request, fds
        for fd in fds:
            os.close(fd)
        sock.send(json.dumps({"pid": pid}).encode())
        _, status = os.waitpid(pid, 0)
        sock.send(json.dumps({"exit": os.waitstatus_to_exitcode(status)}).encode())


def main() -> int:
    sock = socket.socket(fileno=int(sys.argv[1]))
    for name in sys.argv[2:]:
        importlib.import_module(name)
    sock.send(b'{"ready": true}')
    got = serve(sock)
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
