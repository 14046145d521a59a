"""A command that runs a script in a process forked from a listening zygote (zygote.py --listen),
for a program that starts it itself: reckon-mcp-proxy starting the counting MCP server, say,
without the second the server's fresh interpreter spends importing the MCP SDK (standard library
only; run it with ``python -I``).

    python -I forked_exec.py SOCKET SCRIPT [ARGS...]

The script's process gets this one's stdin, stdout and stderr (so its connection to whoever started
this command is its own), environment and working directory. This process then holds neither its
stdin nor its stdout, passes SIGTERM and SIGINT on, and ends the way the script's process ended:
with its exit status, or killed by the same signal."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys


def main(argv: list[str]) -> int:
    path, script = argv[0], argv[1:]
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    sock.connect(path)
    socket.send_fds(sock, [json.dumps({"argv": script, "env": dict(os.environ), "cwd": os.getcwd()}).encode()], [0, 1, 2])
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)  # the script's process holds the pipes now: when it ends, they end
    os.dup2(null, 1)
    os.close(null)
    forked = sock.recv(4096)
    if not forked:
        print("forked_exec.py: the zygote did not fork", file=sys.stderr)
        return 1
    pid = json.loads(forked)["pid"]
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: os.kill(pid, signum))
    ended = sock.recv(4096)
    if not ended:
        print("forked_exec.py: the zygote's handler ended before the script's process", file=sys.stderr)
        return 1
    code = json.loads(ended)["exit"]
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
