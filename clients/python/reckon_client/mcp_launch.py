"""Start the real MCP server for ``reckon-mcp-proxy`` and write down how it ended.

    python -m reckon_client.mcp_launch STATUS_FILE COMMAND [ARGS...]

The server inherits this process's stdin, stdout and stderr, so the MCP connection is the
server's own. When the server exits, its exit status (or the reason it could not be started) is
written to STATUS_FILE and this process exits the same way: the SDK's stdio transport only sees a
closed connection, and the proxy reads the file to name what happened ("exited with status 3").
SIGTERM and SIGINT are passed on to the server.
"""

from __future__ import annotations

import signal
import subprocess
import sys


def main(argv: list[str]) -> int:
    status_file, command = argv[0], argv[1:]
    try:
        child = subprocess.Popen(command)
    except OSError as exc:
        with open(status_file, "w") as f:
            f.write(f"could not be started: {exc.strerror or exc}")
        return 127
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: child.send_signal(signum))
    code = child.wait()
    with open(status_file, "w") as f:
        f.write(f"exited with status {code}" if code >= 0 else f"was killed by {signal.Signals(-code).name}")
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
