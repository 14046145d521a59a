"""Fault-injection points for the crash tests: off unless a test sets them.

A process started with ``RECKON_FAULT_AT=<name>`` stops when it reaches ``fault_point(<name>)``:
it says where it is (``paused at <name>`` on standard output, and ``<pid> <name>`` in the file
``RECKON_FAULT_FILE`` when set) and waits there, so the test can SIGKILL it at exactly that point.
It goes on only if the file ``<RECKON_FAULT_FILE>.go`` appears. Unset, a point costs one lookup
in the environment.
"""

from __future__ import annotations

import os
import sys
import time

FAULT_AT = "RECKON_FAULT_AT"
FAULT_FILE = "RECKON_FAULT_FILE"


def fault_point(name: str) -> None:
    if os.environ.get(FAULT_AT) != name:
        return
    marker = os.environ.get(FAULT_FILE)
    sys.stdout.write(f"paused at {name}\n")
    sys.stdout.flush()
    if marker:
        with open(marker, "w", encoding="utf-8") as f:
            f.write(f"{os.getpid()} {name}\n")
    while not (marker and os.path.exists(marker + ".go")):
        time.sleep(0.02)
