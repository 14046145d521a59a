"""Template filters for the console: times in UTC with a relative age, and payload rendering."""

from __future__ import annotations

from contextvars import ContextVar
from datetime import datetime, timezone
from zoneinfo import ZoneInfo

from django import template
from django.utils.html import format_html

from access.shown import cut_note, json_shown
from runs.fold import format_ts
from recovery.consequences import span

register = template.Library()

# The reader's chosen time zone for this request (console.middleware sets it from their preference);
# None: the browser's own zone, filled in by console.js.
reader_zone: ContextVar[ZoneInfo | None] = ContextVar("reader_zone", default=None)


def _as_dt(value) -> datetime | None:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    if isinstance(value, str) and value:
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    return None


def duration_words(seconds: float) -> str:
    """A short human duration: 42 s, 7 min, 3 h 12 min, 2 d 4 h (the approval screen's words use the same)."""
    return span(seconds)


@register.filter
def duration(seconds) -> str:
    try:
        return duration_words(float(seconds))
    except (TypeError, ValueError):
        return ""


@register.filter
def utc(value) -> str:
    """``2026-09-08 11:00:03 UTC`` inside a <time> element whose datetime attribute is exact."""
    dt = _as_dt(value)
    if dt is None:
        return value or ""
    dt = dt.astimezone(timezone.utc)
    zone = reader_zone.get()
    if zone is None:
        return format_html('<time datetime="{}">{}</time>', format_ts(dt), dt.strftime("%Y-%m-%d %H:%M:%S UTC"))
    local = dt.astimezone(zone)
    return format_html('<time datetime="{}" title="{} {} ({})">{}</time>', format_ts(dt), local.strftime("%Y-%m-%d %H:%M:%S"), local.tzname(), zone.key, dt.strftime("%Y-%m-%d %H:%M:%S UTC"))


@register.filter
def age(value) -> str:
    """How long ago, in words: ``3 h 12 min ago``."""
    delta = _seconds_since(value)
    if delta is None:
        return ""
    return f"{duration_words(delta)} ago" if delta >= 0 else f"in {duration_words(delta)}"


@register.filter
def past_by(value) -> str:
    """How long ago a deadline passed, in words: ``25 min past it`` (empty if it has not)."""
    delta = _seconds_since(value)
    return f"{duration_words(delta)} past it" if delta is not None and delta > 0 else ""


def _seconds_since(value) -> float | None:
    """Seconds from ``value`` (a time, or its ISO text) to now; negative for a time still to come."""
    dt = _as_dt(value)
    return None if dt is None else (datetime.now(timezone.utc) - dt).total_seconds()


@register.filter
def when(value) -> str:
    """Absolute UTC time followed by the relative age."""
    dt = _as_dt(value)
    if dt is None:
        return value or ""
    return format_html("{} <span class=\"age\">({})</span>", utc(dt), age(dt))


@register.filter
def money(value, currency: str = "") -> str:
    """An amount or a cost as people write it (``0.0202 USD``, never a float's ``0.020200000000000003``)."""
    from recovery.consequences import money as money_words

    return "" if value is None else money_words(value, currency or None)


@register.filter
def pretty(value) -> str:
    """``value`` as indented JSON, cut at ``access.shown.SHOWN_CHARS`` with a note saying so."""
    text, cut = json_shown(value)
    return text + cut_note() if cut else text


@register.filter
def scalar(value) -> bool:
    return not isinstance(value, (dict, list))


@register.filter
def get(mapping, key):
    try:
        return mapping.get(key)
    except AttributeError:
        return None


@register.filter
def summary(value, limit: int = 5) -> str:
    """``k=v, k=v`` for the first few entries of a dict (the queue's one-line view of arguments)."""
    if not isinstance(value, dict):
        return "" if value is None else str(value)[:120]
    items = [f"{k}={v if not isinstance(v, (dict, list)) else '…'}" for k, v in list(value.items())[:limit]]
    return ", ".join(items) + (", …" if len(value) > limit else "")
