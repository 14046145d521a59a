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

import hashlib
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "clients" / "python"
EXTRAS = {"plain": "", "mcp": "[mcp]", "langgraph": "[langgraph]", "pydantic-ai": "[pydantic-ai]"}


def _sources_hash() -> str:
    h = hashlib.sha256()
    for p in sorted([CLIENT / "pyproject.toml", *(CLIENT / "reckon_client").rglob("*.py")]):
        h.update(p.relative_to(CLIENT).as_posix().encode() + b"\0" + p.read_bytes())
    return h.hexdigest()[:12]


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
    shutil.rmtree(venv, ignore_errors=True)
    for old in home.glob(f"{name}-*"):  # earlier versions of the sources
        shutil.rmtree(old, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    # A real (not editable) install from the folder: the distribution's packaging is under test too.
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    subprocess.run([str(python), "-m", "pip", "install", "-q", f"{CLIENT}{EXTRAS[name]}"], check=True, env=env, cwd=ROOT)
    (venv / ".built").touch()
    return python


if __name__ == "__main__":
    # Each environment's install waits mostly on unpacking and the disk: built side by side.
    names = sys.argv[1:] or list(EXTRAS)
    with ThreadPoolExecutor(len(names)) as pool:
        for n, python in zip(names, pool.map(client_python, names)):
            print(f"{n}: {python}")
