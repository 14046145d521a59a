"""Plain helpers shared by tests of more than one package: ``manage.py`` run in a real process
against a database of the test's own, and the pattern of an SQL statement that writes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


# A statement that changes the database, wherever it sits (a CTE can hide an INSERT behind WITH).
WRITE = re.compile(
    r"^\s*(INSERT|UPDATE|DELETE|CREATE|ALTER|DROP|TRUNCATE|REPLACE|MERGE)\b|\bINSERT\s+INTO\b|\bDELETE\s+FROM\b|\bUPDATE\s+\S+\s+SET\b",
    re.IGNORECASE,
)


def _manage(database_url: str, *args: str, stdin: str | None = None) -> str:
    env = dict(os.environ, DATABASE_URL=database_url, DJANGO_SETTINGS_MODULE="reckon.settings", LOG_LEVEL="WARNING")
    done = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, input=stdin, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"manage.py {' '.join(args)} failed:\n{done.stdout}\n{done.stderr[-3000:]}"
    return done.stdout
