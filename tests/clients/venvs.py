"""Fresh virtual environments holding only the agent client (clients/python), as an agent
developer would install it: ``plain`` (no extras), ``mcp`` (the MCP proxy's extra), ``langgraph``
and ``pydantic-ai`` (the framework adapters' extras).

Each is built once per version of the client's sources, under ``var/client-venvs/<name>-<hash>``,
and shared by every test (and by both passes of CI, which builds them up front with
``python -m tests.clients.venvs``, all at once, while the server's own environment installs: this
module needs only the standard library). ``RECKON_CLIENT_VENV_<NAME>`` points at a prebuilt one
instead.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "clients" / "python"
EXTRAS = {"plain": "", "mcp": "[mcp]", "langgraph": "[langgraph]", "pydantic-ai": "[pydantic-ai]"}


def _sources_hash() -> str:
    h = hashlib.sha256()
    for p in sorted([CLIENT / "pyproject.toml", *(CLIENT / "reckon_client").rglob("*.py")]):
        h.update(p.relative_to(CLIENT).as_posix().encode() + b"\0" + p.read_bytes())
    return h.hexdigest()[:12]


@contextmanager
def _building(home: Path, name: str) -> Iterator[None]:
    """Held while ``name`` is built under ``home``: the test processes (xdist's workers) that need
    it at once build it once, the others waiting for it, instead of removing each other's."""
    home.mkdir(parents=True, exist_ok=True)
    with open(home / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def client_python(name: str = "plain") -> Path:
    """The python of the ``name`` environment, built now if it is not there yet."""
    given = os.environ.get(f"RECKON_CLIENT_VENV_{name.upper().replace('-', '_')}")
    if given:
        return Path(given) / "bin" / "python"
    home = ROOT / "var" / "client-venvs"
    venv = home / f"{name}-{_sources_hash()}"
    python = venv / "bin" / "python"
    if (venv / ".built").exists():
        return python
    with _building(home, name):
        if (venv / ".built").exists():  # another process built it meanwhile
            return python
        shutil.rmtree(venv, ignore_errors=True)
        for old in home.glob(f"{name}-*"):  # earlier versions of the sources
            shutil.rmtree(old, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        # A real (not editable) install from the folder: the distribution's packaging is under test too.
        env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
        subprocess.run([str(python), "-m", "pip", "install", "-q", f"{CLIENT}{EXTRAS[name]}"], check=True, env=env, cwd=ROOT)
        (venv / ".built").touch()
    return python


# Reference MCP servers nobody here wrote, pinned: the proxy is tried against them (tests/clients/
# test_mcp_reference.py). Built once per set of pins, under var/mcp-reference/<hash>.
REFERENCE_PYPI = ("mcp-server-git==2026.10.19", "mcp-server-time==2026.10.19")
REFERENCE_NPM = ("@modelcontextprotocol/server-filesystem@2026.8.31",)


def reference_servers() -> Path:
    """The folder holding the reference servers: ``bin/mcp-server-git``, ``bin/mcp-server-time``
    (a virtual environment) and ``node_modules/.bin/mcp-server-filesystem`` (npm), built now if
    missing. Needs python's pip and npm to reach their registries the first time."""
    pins = "\n".join(REFERENCE_PYPI + REFERENCE_NPM)
    home = ROOT / "var" / "mcp-reference"
    folder = home / hashlib.sha256(pins.encode()).hexdigest()[:12]
    if (folder / ".built").exists():
        return folder
    with _building(home, "reference"):
        if (folder / ".built").exists():  # another process built it meanwhile
            return folder
        for old in home.glob("[!.]*"):  # this set's unfinished folder, and earlier sets'
            shutil.rmtree(old, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
        env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
        subprocess.run([str(folder / "bin" / "python"), "-m", "pip", "install", "-q", *REFERENCE_PYPI], check=True, env=env, cwd=ROOT)
        subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--silent", "--prefix", str(folder), *REFERENCE_NPM], check=True, cwd=ROOT)
        (folder / ".built").touch()
    return folder


if __name__ == "__main__":
    # Each environment's install waits mostly on unpacking and the disk: built side by side.
    names = sys.argv[1:] or [*EXTRAS, "reference"]

    def build(n: str) -> Path:
        return reference_servers() if n == "reference" else client_python(n)

    with ThreadPoolExecutor(len(names)) as pool:
        for n, built in zip(names, pool.map(build, names)):
            print(f"{n}: {built}")
