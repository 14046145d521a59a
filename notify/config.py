"""Channels and routes from a TOML file: parse, check, and load with a recorded change.

The file's format is documented in docs/notifications.md. Loading replaces the whole configuration
(the last change wins) in one transaction, and returns what it changed, one line per channel or
route, so an operator sees the effect before trusting it. Channel secrets (``secret``,
``routing_key``) are never shown back: the change history and every line printed mask them.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import tomllib
import zoneinfo
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from notify.models import CHANNEL_KINDS, Channel, ConfigChange, Route
from notify.outbox import routes_forget
from recovery.models import RISK_CLASSES
from recovery.outbound import OutboundRefused, url_check
from recovery.policies import PolicyError, duration_parse

SECRET_KEYS = ("secret", "routing_key")
MASK = "[masked]"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
_AT = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)$")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+$")


class NotifyConfigError(ValueError):
    """A configuration that cannot be used; the message names the table and the field."""


@dataclass(frozen=True)
class Parsed:
    channels: dict[str, dict]  # name -> {"kind": ..., "config": {...}}
    routes: list[dict]  # Route fields, in the file's order


def _url(where: str, value: Any) -> str:
    if not isinstance(value, str) or not re.match(r"^https?://[^\s/]+", value):
        raise NotifyConfigError(f"{where}: url must be an http:// or https:// URL, got {value!r}")
    try:
        return url_check(value)  # and again at every delivery (notify.delivery through recovery.adapters)
    except OutboundRefused as exc:
        raise NotifyConfigError(f"{where}: url {exc}") from None


def _channel(name: str, table: Any) -> dict:
    where = f"channels.{name}"
    if not _NAME.match(name):
        raise NotifyConfigError(f"{where}: a channel name is 1-100 letters, digits, '.', '_' or '-'")
    if not isinstance(table, dict):
        raise NotifyConfigError(f"{where}: must be a table")
    kind = table.get("kind")
    if kind not in CHANNEL_KINDS:
        raise NotifyConfigError(f"{where}: kind {kind!r} is not one of {', '.join(CHANNEL_KINDS)}")
    allowed = {"webhook": {"url", "secret"}, "slack": {"url"}, "pagerduty": {"url", "routing_key"}, "email": {"to"}}[kind]
    unknown = sorted(set(table) - allowed - {"kind"})
    if unknown:
        raise NotifyConfigError(f"{where}: unknown field {unknown[0]!r} for a {kind} channel (allowed: {', '.join(sorted(allowed))})")
    config: dict[str, Any] = {}
    if kind == "email":
        to = table.get("to")
        if not isinstance(to, list) or not to or not all(isinstance(a, str) and _EMAIL.match(a) for a in to):
            raise NotifyConfigError(f"{where}: to must be a non-empty list of e-mail addresses")
        config["to"] = list(to)
    else:
        config["url"] = _url(where, table.get("url"))
    if kind == "webhook":
        secret = table.get("secret")
        if not isinstance(secret, str) or not secret.startswith("whsec_"):
            raise NotifyConfigError(f'{where}: secret must be a Standard Webhooks secret, "whsec_" followed by base64')
        try:
            if not base64.b64decode(secret[6:], validate=True):
                raise binascii.Error("empty")
        except (binascii.Error, ValueError):
            raise NotifyConfigError(f'{where}: secret is not base64 after "whsec_"') from None
        config["secret"] = secret
    if kind == "pagerduty":
        key = table.get("routing_key")
        if not isinstance(key, str) or not key.strip():
            raise NotifyConfigError(f"{where}: routing_key is required")
        config["routing_key"] = key
    return {"kind": kind, "config": config}


def _names(where: str, value: Any, field: str, allowed: tuple[str, ...] | None = None) -> list[str] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        raise NotifyConfigError(f"{where}: {field} must be a non-empty list of names")
    if allowed is not None:
        bad = [v for v in value if v not in allowed]
        if bad:
            raise NotifyConfigError(f"{where}: {field} {bad[0]!r} is not one of {', '.join(allowed)}")
    return list(value)


def _duration(where: str, value: Any) -> int:
    try:
        return int(duration_parse(value, what=where))
    except PolicyError as exc:
        raise NotifyConfigError(str(exc)) from None


def _notify_list(where: str, value: Any, channels: dict) -> list[str]:
    names = _names(where, value, "notify")
    if names is None:
        raise NotifyConfigError(f"{where}: notify is required: the channels to notify")
    for n in names:
        if n not in channels:
            raise NotifyConfigError(f"{where}: notify names channel {n!r}, which the file does not define")
    return names


def _route(i: int, table: Any, channels: dict) -> dict:
    where = f"routes[{i}]"
    if not isinstance(table, dict):
        raise NotifyConfigError(f"{where}: must be a table")
    unknown = sorted(set(table) - {"risk_class", "tool", "tenant", "levels", "repeat", "digest"})
    if unknown:
        raise NotifyConfigError(f"{where}: unknown field {unknown[0]!r}")
    levels = table.get("levels")
    if "digest" not in table and (not isinstance(levels, list) or not levels):
        raise NotifyConfigError(f'{where}: levels must be a non-empty list of {{ notify = [...], after = "0m" }}')
    out_levels = []
    last = -1
    for j, level in enumerate(levels or []):
        lw = f"{where}.levels[{j}]"
        if not isinstance(level, dict) or sorted(set(level) - {"notify", "after"}):
            raise NotifyConfigError(f'{lw}: a level is {{ notify = [...], after = "15m" }}')
        after = _duration(f"{lw}.after", level.get("after", "0m"))
        if j == 0 and after != 0:
            raise NotifyConfigError(f'{lw}: the first level fires at once: after must be "0m"')
        if after < last:
            raise NotifyConfigError(f"{lw}: after must not be shorter than the level before it")
        last = after
        out_levels.append({"notify": _notify_list(lw, level.get("notify"), channels), "after_s": after})
    digest = table.get("digest")
    if digest is not None:
        dw = f"{where}.digest"
        if not isinstance(digest, dict) or sorted(set(digest) - {"notify", "at", "timezone"}):
            raise NotifyConfigError(f'{dw}: a digest is {{ notify = [...], at = "08:00", timezone = "UTC" }}')
        at = digest.get("at", "08:00")
        if not isinstance(at, str) or not _AT.match(at):
            raise NotifyConfigError(f'{dw}.at: {at!r} is not a time like "08:00"')
        tz = digest.get("timezone", "UTC")
        try:
            zoneinfo.ZoneInfo(tz)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError, TypeError):
            raise NotifyConfigError(f"{dw}.timezone: {tz!r} is not a known time zone") from None
        digest = {"notify": _notify_list(dw, digest.get("notify"), channels), "at": at, "timezone": tz}
    return {
        "position": i,
        "risk_class": _names(where, table.get("risk_class"), "risk_class", RISK_CLASSES),
        "tool": _names(where, table.get("tool"), "tool"),
        "tenant": _names(where, table.get("tenant"), "tenant"),
        "levels": out_levels,
        "repeat_s": _duration(f"{where}.repeat", table["repeat"]) if "repeat" in table else None,
        "digest": digest,
    }


def config_parse(*, text: str, keep: dict[str, dict] | None = None) -> Parsed:
    """The channels and routes of a TOML document; NotifyConfigError on the first problem.

    ``keep``: the current channels. A webhook or PagerDuty channel whose secret (``secret``,
    ``routing_key``) is left out or blank keeps the current one of the same name and kind, so a
    file written from the screen's export, which never carries secrets, loads back unchanged."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise NotifyConfigError(f"not valid TOML: {exc}") from None
    return config_check(doc, keep=keep)


def config_check(doc: dict, *, keep: dict[str, dict] | None = None) -> Parsed:
    """Check a configuration shaped as the TOML file is (``{"channels": {...}, "routes": [...]}``)."""
    unknown = sorted(set(doc) - {"channels", "routes"})
    if unknown:
        raise NotifyConfigError(f"unknown top-level key {unknown[0]!r}: the file has [channels.<name>] and [[routes]]")
    channels = doc.get("channels", {})
    if not isinstance(channels, dict):
        raise NotifyConfigError("channels must be tables: [channels.<name>]")
    if keep:
        channels = {name: _secrets_kept(table, keep.get(name)) for name, table in channels.items()}
    parsed_channels = {name: _channel(name, table) for name, table in channels.items()}
    routes = doc.get("routes", [])
    if not isinstance(routes, list):
        raise NotifyConfigError("routes must be an array of tables: [[routes]]")
    return Parsed(parsed_channels, [_route(i, r, parsed_channels) for i, r in enumerate(routes)])


def _secrets_kept(table: Any, current: dict | None) -> Any:
    if not isinstance(table, dict) or current is None or table.get("kind") != current["kind"]:
        return table
    kept = {k: current["config"][k] for k in SECRET_KEYS if k in current["config"] and not table.get(k)}
    return {**table, **kept}


def _duration_text(seconds: int) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s" if seconds else "0m"


def config_document(channels: dict[str, dict], routes: list[dict], *, secrets: bool = False) -> dict:
    """The configuration as the TOML file would give it (durations as "15m"); without ``secrets``
    the channels' secrets are left out, as a file that keeps the current ones would."""
    doc_channels = {n: {"kind": c["kind"], **{k: v for k, v in c["config"].items() if secrets or k not in SECRET_KEYS}} for n, c in channels.items()}
    doc_routes = []
    for r in routes:
        table: dict[str, Any] = {k: r[k] for k in ("risk_class", "tool", "tenant") if r.get(k) is not None}
        if r.get("levels"):
            table["levels"] = [{"notify": list(lv["notify"]), "after": _duration_text(lv["after_s"])} for lv in r["levels"]]
        if r.get("repeat_s") is not None:
            table["repeat"] = _duration_text(r["repeat_s"])
        if r.get("digest"):
            table["digest"] = dict(r["digest"])
        doc_routes.append(table)
    return {"channels": doc_channels, "routes": doc_routes}


def _toml_value(v: Any) -> str:
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)  # a JSON string is a TOML basic string
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {_toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(f"cannot write {type(v).__name__} as TOML")


def config_toml(doc: dict) -> str:
    """``doc`` (``config_document``'s shape) as the TOML file ``load_notifications`` reads."""
    out: list[str] = []
    for name, table in doc.get("channels", {}).items():
        out.append(f"[channels.{name}]")
        out += [f"{k} = {_toml_value(v)}" for k, v in table.items()]
        out.append("")
    for table in doc.get("routes", []):
        out.append("[[routes]]")
        for k, v in table.items():
            if k == "levels":
                out.append("levels = [")
                out += [f"  {_toml_value(lv)}," for lv in v]
                out.append("]")
            else:
                out.append(f"{k} = {_toml_value(v)}")
        out.append("")
    return "\n".join(out)


def config_masked(channels: dict[str, dict]) -> dict[str, dict]:
    return {n: {"kind": c["kind"], **{k: (MASK if k in SECRET_KEYS else v) for k, v in c["config"].items()}} for n, c in channels.items()}


def _current() -> tuple[dict[str, dict], list[dict]]:
    channels = {c.name: {"kind": c.kind, "config": c.config} for c in Channel.objects.all()}
    fields = ("position", "risk_class", "tool", "tenant", "levels", "repeat_s", "digest")
    routes = [{f: getattr(r, f) for f in fields} for r in Route.objects.all()]
    return channels, routes


def _changes(old_ch: dict, new_ch: dict, old_routes: list, new_routes: list) -> list[str]:
    lines = []
    for name in sorted(set(old_ch) | set(new_ch)):
        if name not in old_ch:
            lines.append(f"channel {name}: added ({new_ch[name]['kind']})")
        elif name not in new_ch:
            lines.append(f"channel {name}: removed")
        elif old_ch[name] != new_ch[name]:
            changed = sorted(k for k in set(old_ch[name]["config"]) | set(new_ch[name]["config"]) if old_ch[name]["config"].get(k) != new_ch[name]["config"].get(k))
            if old_ch[name]["kind"] != new_ch[name]["kind"]:
                changed.insert(0, "kind")
            lines.append(f"channel {name}: changed ({', '.join(changed)})")
        else:
            lines.append(f"channel {name}: unchanged")
    for i in range(max(len(old_routes), len(new_routes))):
        if i >= len(old_routes):
            lines.append(f"route {i}: added")
        elif i >= len(new_routes):
            lines.append(f"route {i}: removed")
        elif old_routes[i] == new_routes[i]:
            lines.append(f"route {i}: unchanged")
        else:
            changed = [_ROUTE_FIELD_NAMES.get(k, k) for k in _ROUTE_FIELDS if old_routes[i].get(k) != new_routes[i].get(k)]
            lines.append(f"route {i}: changed ({', '.join(changed)})")
    return lines


_ROUTE_FIELDS = ("risk_class", "tool", "tenant", "levels", "repeat_s", "digest")
_ROUTE_FIELD_NAMES = {"repeat_s": "repeat"}


def _lock() -> None:
    """Serialise changes to the configuration: each edit reads the current one and writes it back
    whole, so two concurrent edits (two administrators, a console edit and a file) must not
    interleave, or the later would silently undo the earlier's other fields. On PostgreSQL a
    transaction-scoped advisory lock; SQLite serialises writers itself."""
    from django.db import connection

    if connection.vendor == "postgresql":
        with connection.cursor() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(hashtext('reckon.notify.config'))")


def _store(parsed: Parsed, *, old: tuple[dict, list], by: str, source: str) -> list[str]:
    """Replace the configuration with ``parsed`` and record the change; inside the caller's
    transaction, after ``_lock``. Returns the lines saying what changed."""
    old_ch, old_routes = old
    lines = _changes(old_ch, parsed.channels, old_routes, parsed.routes)
    if old_ch == parsed.channels and old_routes == parsed.routes:
        return lines
    Route.objects.all().delete()
    Channel.objects.exclude(name__in=list(parsed.channels)).delete()
    for name, c in parsed.channels.items():
        Channel.objects.update_or_create(name=name, defaults={"kind": c["kind"], "config": c["config"]})
    Route.objects.bulk_create([Route(**r) for r in parsed.routes])
    routes_forget()
    transaction.on_commit(routes_forget)  # and again, in case this process read the old ones meanwhile
    ConfigChange.objects.create(
        by=by[:150],
        source=source[:300],
        summary="\n".join(line for line in lines if not line.endswith(": unchanged")),
        before={"channels": config_masked(old_ch), "routes": old_routes},
        after={"channels": config_masked(parsed.channels), "routes": parsed.routes},
    )
    return lines


def notifications_preview(*, text: str) -> list[str]:
    """What loading ``text`` would change, one line per channel and route, changing nothing.
    Raises NotifyConfigError on a bad file."""
    old = _current()
    parsed = config_parse(text=text, keep=old[0])
    return _changes(old[0], parsed.channels, old[1], parsed.routes)


def notifications_load(*, text: str, by: str, source: str = "") -> list[str]:
    """Replace the channels and routes with the file's, all or nothing, and record the change.

    Returns one line per channel and route saying what happened to it (added, changed with the
    fields named, removed, unchanged). Raises NotifyConfigError, loading nothing, on a bad file.
    A channel's secret left out of the file keeps the current one (``config_parse``).
    """
    with transaction.atomic():
        _lock()
        old = _current()
        return _store(config_parse(text=text, keep=old[0]), old=old, by=by, source=source)


def config_current() -> dict:
    """The configuration as the file would give it, secrets left out: for the console's screen,
    its export and its forms."""
    return config_document(*_current())


def _edit(change, *, by: str, source: str) -> list[str]:
    """Apply ``change`` (a function that edits the file-shaped document in place) to the current
    configuration under the lock, check the result as a whole file is checked, and store it.
    The last change wins: each edit starts from what the one before it stored."""
    with transaction.atomic():
        _lock()
        old = _current()
        doc = config_document(*old, secrets=True)
        change(doc)
        return _store(config_check(doc), old=old, by=by, source=source)


def channel_save(*, name: str, table: dict, by: str) -> list[str]:
    """Add the channel ``name`` or change it to ``table`` (the file's fields). A secret
    (``secret``, ``routing_key``) left blank keeps the current one, if the kind is unchanged."""
    name = (name or "").strip()

    def change(doc):
        current = doc["channels"].get(name)
        new = {k: v for k, v in table.items() if v not in (None, "", [])}
        if current is not None and current.get("kind") == new.get("kind"):
            new.update({k: current[k] for k in SECRET_KEYS if k in current and not new.get(k)})
        doc["channels"][name] = new

    return _edit(change, by=by, source=f"console: channel {name}")


def channel_remove(*, name: str, by: str) -> list[str]:
    """Remove a channel no route names; NotifyConfigError naming the route otherwise."""

    def change(doc):
        if name not in doc["channels"]:
            raise NotifyConfigError(f"channels.{name}: there is no such channel")
        for i, r in enumerate(doc["routes"]):
            named = [n for lv in r.get("levels", []) for n in lv["notify"]] + list((r.get("digest") or {}).get("notify", []))
            if name in named:
                raise NotifyConfigError(f"channels.{name}: route {i} notifies it; change the route first")
        del doc["channels"][name]

    return _edit(change, by=by, source=f"console: channel {name} removed")


def route_save(*, position: int | None, table: dict, by: str) -> list[str]:
    """Change route ``position`` to ``table`` (the file's fields), or add it last when ``position``
    is None."""

    def change(doc):
        routes = doc["routes"]
        if position is None:
            routes.append(table)
        elif 0 <= position < len(routes):
            routes[position] = table
        else:
            raise NotifyConfigError(f"routes[{position}]: there is no such route")

    where = "new" if position is None else str(position)
    return _edit(change, by=by, source=f"console: route {where}")


def route_remove(*, position: int, by: str) -> list[str]:
    def change(doc):
        if not 0 <= position < len(doc["routes"]):
            raise NotifyConfigError(f"routes[{position}]: there is no such route")
        del doc["routes"][position]

    return _edit(change, by=by, source=f"console: route {position} removed")
