"""Strict environment helpers: an unexpected value fails loudly, naming the variable.

A setting read from the environment that silently falls back to a default hides a typo in a
deployment until the moment it matters. Every helper here raises ImproperlyConfigured naming the
variable and the value it could not use. Secrets may also come from ``NAME_FILE``.
"""

from __future__ import annotations

import os

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def envstr(name: str, default: str | None = None) -> str | None:
    """The variable's value, or the contents of the file named by ``NAME_FILE``, or the default."""
    value = os.environ.get(name)
    if value is not None:
        return value
    path = os.environ.get(f"{name}_FILE")
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                return f.read().strip()
        except OSError as exc:
            raise ImproperlyConfigured(f"{name}_FILE={path!r} cannot be read: {exc.strerror}") from None
    return default


def envbool(name: str, default: bool) -> bool:
    value = envstr(name)
    if value is None or value == "":
        return default
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={value!r} is not a boolean: use one of 1/0, true/false, yes/no, on/off")


def envint(name: str, default: int, *, minimum: int | None = None) -> int:
    value = envstr(name)
    if value is None or value == "":
        return default
    try:
        number = int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r} is not an integer") from None
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name}={value!r} must be at least {minimum}")
    return number


def envfloat(name: str, default: float, *, minimum: float | None = None) -> float:
    value = envstr(name)
    if value is None or value == "":
        return default
    try:
        number = float(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r} is not a number") from None
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name}={value!r} must be at least {minimum}")
    return number


def envlist(name: str, default: tuple[str, ...] = (), *, pattern: str | None = None, what: str = "an entry") -> tuple[str, ...]:
    """A comma-separated list (blanks around entries ignored); with ``pattern``, every entry must match
    it whole, or ImproperlyConfigured names the variable and the entry (``what`` says what one is)."""
    value = envstr(name)
    if value is None:
        return tuple(default)
    items = tuple(item.strip() for item in value.split(",") if item.strip())
    if pattern is not None:
        import re

        for item in items:
            if not re.fullmatch(pattern, item):
                raise ImproperlyConfigured(f"{name}: {item!r} is not {what}")
    return items


def database_url() -> str:
    """A DATABASE_URL naming the database this process uses now (a test or benchmark database
    included), so a child process (gunicorn, a Celery worker, a command) reaches the same one."""
    # Imported here: settings import this module before Django's database layer may be loaded.
    from urllib.parse import quote

    from django.db import connection

    s = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{s['NAME']}"
    auth = s["USER"] or "postgres"
    if s.get("PASSWORD"):
        auth += ":" + quote(s["PASSWORD"], safe="")
    return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")


def envweekly(name: str, default: str) -> tuple[str, int, int]:
    """A weekly time in UTC, ``"mon 08:00"`` (a weekday's first three letters, then 24-hour
    hours:minutes), as (weekday, hour, minute); anything else names the variable and the form."""
    import re

    value = (envstr(name) or default).strip().lower()
    m = re.fullmatch(r"([a-z]{3}) +([01]?\d|2[0-3]):([0-5]\d)", value)
    if not m or m.group(1) not in WEEKDAYS:
        raise ImproperlyConfigured(f"{name}={value!r} is not a weekday and a UTC time like 'mon 08:00'")
    return m.group(1), int(m.group(2)), int(m.group(3))
