"""The production variables docs/configuration.md documents, for tests that run Reckon the
way it is deployed: DEBUG off, behind a TLS-terminating proxy, cookies Secure, HSTS on; and
Django's deployment checklist run over them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SECRET = "test-only-4f9c2a7e1b8d6c3f0a5e9b2d7c4f1a8e6b3d0c9f2a5e8b1d4c7f0a3e6b9d2c5f8a"


# What the TLS-terminating proxy in front of a production server adds to each request it passes
# on (RECKON_TLS_PROXY): a test's browser sends it itself.
PROXY_HEADERS = {"X-Forwarded-Proto": "https"}


def production_env(**extra: str) -> dict[str, str]:
    return {
        "DEBUG": "false",
        "SECRET_KEY": SECRET,
        "ALLOWED_HOSTS": "reckon.example.com,127.0.0.1",
        "RECKON_HTTPS": "true",
        "RECKON_TLS_PROXY": "true",
        **extra,
    }


def _check_deploy(env: dict[str, str]) -> subprocess.CompletedProcess:
    # The browser tests set DJANGO_ALLOW_ASYNC_UNSAFE in this process; a deployment never would.
    full = {k: v for k, v in os.environ.items() if not k.startswith(("RECKON_HSTS", "RECKON_SSL")) and k != "DJANGO_ALLOW_ASYNC_UNSAFE"}
    full.update(env, DJANGO_SETTINGS_MODULE="reckon.settings")
    return subprocess.run([sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"], cwd=ROOT, env=full, capture_output=True, text=True, timeout=120)
