"""Adapters: how Reckon asks a tool's receiver what happened, and how it retries or undoes a call.

Every lookup returns ``Evidence`` with one of four outcomes (match, absent, conflict, unavailable),
the observed fields, the raw response and, for a conflict, both values of every field that differs.
An adapter never turns a transport problem into "absent": only an authoritative answer is absence
(docs/formats.md, "The `http` adapter"). Execute transmits the call's idempotency key to the receiver, so a retry of an
effect that did happen returns the receiver's stored result instead of doing it twice.

Built in: ``http`` (docs/formats.md; every URL passes ``recovery.outbound``'s check when the
policy is written and again at each call), ``python`` (a function named by dotted path in a module
``RECKON_LOOKUP_MODULES`` lists, called as ``fn(call=CallRef, spec=dict,
kind="lookup"|"execute"|"compensate")`` and returning Evidence, Execution or a dict with the same
keys) and ``demo_ledger`` (an in-database ledger for the quickstart).

A receiver's answer is kept in the evidence only as far as it is needed: decoded, as ``observed``,
and as text (``raw``) cut to RAW_LIMIT characters, which is what a reader is shown, masked.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import urllib.parse
from dataclasses import dataclass, field, fields
from importlib import import_module
from typing import Any

from django.conf import settings

from recovery import outbound
from recovery.models import DemoLedgerEntry
from recovery.outbound import OutboundRefused

OUTCOMES = ("match", "absent", "conflict", "unavailable")
# A receiver's answer as text, kept in the log and shown (masked) to every reader of the call: enough
# to tell an error page from another, not a copy of whatever the receiver serves.
RAW_LIMIT = 300
# An answer longer than this is not read (nor decoded): a lookup's answer is one operation's record.
ANSWER_MAX_BYTES = 1 << 20


class AdapterError(Exception):
    """A hook that cannot be used as configured (bad URL template, missing function): a broken policy."""


@dataclass(frozen=True)
class CallRef:
    """What an adapter knows of the call it is asked about."""

    run_id: str
    call_id: str
    idempotency_key: str
    tool: str
    arguments: Any
    start_seq: int = 0


@dataclass
class Evidence:
    outcome: str
    observed: Any = None
    raw: str = ""
    status: int | None = None
    comparison: dict = field(default_factory=dict)  # field -> {"expected", "observed", "equal"}
    error: str = ""

    def as_dict(self) -> dict:
        # Shallow: the values are already plain JSON data that nothing mutates afterwards, and
        # dataclasses.asdict's deep copy of the response cost more than the comparison itself.
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass
class Execution:
    outcome: str  # done | failed (proven, no effect) | uncertain
    result: Any = None
    raw: str = ""
    status: int | None = None
    error: str = ""

    def as_dict(self) -> dict:
        # Shallow: the values are already plain JSON data that nothing mutates afterwards, and
        # dataclasses.asdict's deep copy of the response cost more than the comparison itself.
        return {f.name: getattr(self, f.name) for f in fields(self)}


def as_text(value: Any) -> str:
    """A value as the string it compares by: strings as they are, everything else as canonical JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def fields_compare(*, expected: Any, observed: Any, fields: list[str] | tuple[str, ...]) -> tuple[str, dict]:
    """match or conflict, with every semantic field compared as a string (all arguments when none named)."""
    if not isinstance(observed, dict):
        return "conflict", {"(operation)": {"expected": "an object", "observed": as_text(observed), "equal": False}}
    names = list(fields) or (sorted(expected) if isinstance(expected, dict) else [])
    comparison = {}
    for name in names:
        want = expected.get(name) if isinstance(expected, dict) else None
        got = observed.get(name)
        equal = name in observed and as_text(want) == as_text(got)
        comparison[name] = {"expected": want, "observed": got, "equal": equal}
    outcome = "match" if all(c["equal"] for c in comparison.values()) else "conflict"
    return outcome, comparison


def _call_ids(call: CallRef) -> dict[str, str]:
    """What a URL template may name besides the call's arguments (which these override)."""
    return {"idempotency_key": call.idempotency_key, "call_id": call.call_id, "run_id": call.run_id}


def _url_quoted(values: dict) -> dict[str, str]:
    return {k: urllib.parse.quote(as_text(v), safe="") for k, v in values.items()}


def url_render(template: str, call: CallRef) -> str:
    """Fill ``{idempotency_key}``, ``{call_id}``, ``{run_id}`` and any argument, each URL-quoted."""
    values = dict(call.arguments) if isinstance(call.arguments, dict) else {}
    values.update(_call_ids(call))
    try:
        return template.format_map(_url_quoted(values))
    except KeyError as exc:
        raise AdapterError(f"URL template {template!r} names {exc.args[0]!r}, which the call does not have") from None
    except (ValueError, IndexError) as exc:
        raise AdapterError(f"URL template {template!r} is malformed: {exc}") from None


class _KeepPlaceholders(dict):
    def __missing__(self, key):
        return "{" + key + "}"


def url_shown(template: str, call: CallRef) -> str:
    """The URL as errors quote it: the call's run id, call id and idempotency key filled in, each
    argument left as its ``{name}``.

    Errors are stored in the run's log and shown as the call's last error, where payload masking
    does not reach; an argument's value may be one a policy marks sensitive (an account number in
    a lookup path), and the payload shows every argument anyway, masked where it must be.
    """
    try:
        return template.format_map(_KeepPlaceholders(_url_quoted(_call_ids(call))))
    except (ValueError, IndexError, AttributeError, TypeError):
        return template


# --- HTTP ---------------------------------------------------------------------------------------

_local = threading.local()


def _connection(scheme: str, netloc: str, timeout: float, fresh: bool):
    pool = getattr(_local, "pool", None)
    if pool is None:
        pool = _local.pool = {}
    key = (scheme, netloc)
    conn = None if fresh else pool.get(key)
    if conn is None:
        conn = outbound.connection(scheme, netloc, timeout=timeout)  # connects only where the check allows
        pool[key] = conn
    conn.timeout = timeout
    if conn.sock is not None:
        conn.sock.settimeout(timeout)
    return conn


def connections_close() -> None:
    """Close this thread's kept-alive connections to receivers: for a thread that ends (as it
    closes its database connections), so that no socket is left to the garbage collector."""
    for conn in getattr(_local, "pool", {}).values():
        conn.close()
    _local.pool = {}


def _drop(scheme: str, netloc: str) -> None:
    conn = getattr(_local, "pool", {}).pop((scheme, netloc), None)
    if conn is not None:
        conn.close()


class AnswerTooLong(http.client.HTTPException):
    """The receiver's answer is longer than ANSWER_MAX_BYTES: not read, a transport failure."""


def http_request(method: str, url: str, *, body: bytes | None = None, headers: dict | None = None, timeout: float = 5.0) -> tuple[int, bytes]:
    """One request over a kept-alive connection per thread; raises OSError/HTTPException on transport
    failure, OutboundRefused for a URL Reckon must not call (``recovery.outbound``). No redirect is
    followed: a 3xx answer is returned as it is."""
    outbound.url_target(url)
    parts = urllib.parse.urlsplit(url)
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    hdrs = {"Accept": "application/json", "User-Agent": "reckon-recovery"}
    hdrs.update(headers or {})
    for fresh in (False, True):
        conn = _connection(parts.scheme, parts.netloc, timeout, fresh)
        reused = conn.sock is not None
        try:
            conn.request(method, path, body=body, headers=hdrs)
            resp = conn.getresponse()
            data = resp.read(ANSWER_MAX_BYTES + 1)
            if len(data) > ANSWER_MAX_BYTES:
                _drop(parts.scheme, parts.netloc)  # the rest is never read: the connection cannot be reused
                raise AnswerTooLong(f"the answer is longer than {ANSWER_MAX_BYTES} bytes")
            if resp.getheader("Connection", "").lower() == "close":
                _drop(parts.scheme, parts.netloc)
            return resp.status, data
        except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
            _drop(parts.scheme, parts.netloc)
            if not reused or fresh:
                raise
            # The server closed an idle kept-alive connection before reading this request: the
            # request never arrived, so sending it again on a fresh connection is safe.
        except BaseException:
            _drop(parts.scheme, parts.netloc)
            raise
    raise AssertionError("unreachable")


def raw_text(data: bytes | str) -> str:
    """A receiver's answer as the evidence keeps it: text, at most RAW_LIMIT characters."""
    text = data if isinstance(data, str) else data[: RAW_LIMIT * 4].decode("utf-8", "replace")
    return text if len(text) <= RAW_LIMIT else text[: RAW_LIMIT - 1] + "…"


def evidence_shortened(evidence: Any) -> Any:
    """Evidence as a reader is shown it, after masking: its raw answer at most RAW_LIMIT characters
    (evidence recorded before the limit kept up to 4,000)."""
    if isinstance(evidence, dict) and isinstance(evidence.get("raw"), str) and len(evidence["raw"]) > RAW_LIMIT:
        return {**evidence, "raw": raw_text(evidence["raw"])}
    return evidence


def _decode(data: bytes) -> Any:
    # Numbers keep their literal text, so 840.00 compares equal to "840.00" and never to "840.0".
    return json.loads(data.decode("utf-8"), parse_float=str, parse_int=str)


def http_lookup(call: CallRef, spec: dict, semantic_fields) -> Evidence:
    url = url_render(spec["url"], call)
    # The URL as errors quote it (``url_shown``) is made only for an error: most lookups answer.
    try:
        status, data = http_request(spec.get("method", "GET"), url, timeout=float(spec.get("timeout_s", 5.0)))
    except OutboundRefused as exc:
        raise AdapterError(f"GET {url_shown(spec['url'], call)}: {exc}") from None
    except (OSError, http.client.HTTPException, socket.timeout) as exc:
        return Evidence("unavailable", error=f"GET {url_shown(spec['url'], call)}: {type(exc).__name__}: {exc}")
    raw = raw_text(data)
    try:
        body = _decode(data)
    except ValueError:
        body = None
        not_json = True
    else:
        not_json = False
    if status == 200 and isinstance(body, dict):
        outcome, comparison = fields_compare(expected=call.arguments, observed=body, fields=semantic_fields)
        return Evidence(outcome, observed=body, raw=raw, status=status, comparison=comparison)
    if status == 404 and isinstance(body, dict) and body.get("final") is True:
        return Evidence("absent", observed=body, raw=raw, status=status)
    why = "body is not JSON" if not_json else f"HTTP {status}" + (" without {\"final\": true}" if status == 404 else "")
    return Evidence("unavailable", observed=body, raw=raw, status=status, error=f"GET {url_shown(spec['url'], call)}: {why}")


def http_execute(call: CallRef, spec: dict) -> Execution:
    url = url_render(spec["url"], call)
    shown = url_shown(spec["url"], call)
    method = spec.get("method", "POST")
    body = json.dumps(call.arguments, ensure_ascii=False).encode("utf-8")
    headers = {"Content-Type": "application/json", "Idempotency-Key": call.idempotency_key}
    try:
        status, data = http_request(method, url, body=body, headers=headers, timeout=float(spec.get("timeout_s", 5.0)))
    except OutboundRefused as exc:
        raise AdapterError(f"{method} {shown}: {exc}") from None
    except (OSError, http.client.HTTPException, socket.timeout) as exc:
        return Execution("uncertain", error=f"{method} {shown}: {type(exc).__name__}: {exc}")
    raw = raw_text(data)
    try:
        result = json.loads(data.decode("utf-8")) if data else None
    except ValueError:
        result = raw
    if 200 <= status < 300:
        return Execution("done", result=result, raw=raw, status=status)
    if 400 <= status < 500 and status not in (409, 429):
        return Execution("failed", result=result, raw=raw, status=status, error=f"{method} {shown}: HTTP {status} (proven failure)")
    return Execution("uncertain", result=result, raw=raw, status=status, error=f"{method} {shown}: HTTP {status}")


# --- Python -----------------------------------------------------------------------------------


def python_path_check(path: str) -> tuple[str, str]:
    """(module, function name) of a python adapter's dotted path, if its module is one
    RECKON_LOOKUP_MODULES lists or inside one; AdapterError naming the path and the setting otherwise.
    Checked before anything is imported: importing a module runs its code."""
    module, _, name = path.replace(":", ".").rpartition(".")
    listed = settings.RECKON_LOOKUP_MODULES
    if not any(module == m or module.startswith(m + ".") for m in listed):
        allowed = f"it lists {', '.join(listed)}" if listed else "it lists none"
        raise AdapterError(f"python adapter {path!r}: module {module!r} is not one RECKON_LOOKUP_MODULES lists ({allowed})")
    return module, name


def _function(path: str):
    module, name = python_path_check(path)
    try:
        fn = getattr(import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise AdapterError(f"python adapter {path!r} cannot be imported: {exc}") from None
    if not callable(fn):
        raise AdapterError(f"python adapter {path!r} is not a function")
    return fn


def _python(kind: str, call: CallRef, spec: dict):
    return _function(spec["path"])(call=call, spec=spec, kind=kind)


# --- demo ledger ------------------------------------------------------------------------------


def demo_lookup(call: CallRef, semantic_fields) -> Evidence:
    entry = DemoLedgerEntry.objects.filter(idempotency_key=call.idempotency_key).first()
    if entry is None:
        # The demo ledger commits synchronously: a missing key can never appear later.
        return Evidence("absent", observed={"final": True}, raw='{"final": true}', status=404)
    outcome, comparison = fields_compare(expected=call.arguments, observed=entry.fields, fields=semantic_fields)
    return Evidence(outcome, observed=entry.fields, raw=json.dumps(entry.fields), status=200, comparison=comparison)


def demo_execute(call: CallRef) -> Execution:
    entry, _ = DemoLedgerEntry.objects.get_or_create(
        idempotency_key=call.idempotency_key,
        defaults={"tool": call.tool, "fields": call.arguments, "result": {"ledger_id": f"L-{call.idempotency_key[:8]}", "status": "posted"}},
    )
    return Execution("done", result=entry.result, raw=json.dumps(entry.result), status=201)


# --- dispatch ---------------------------------------------------------------------------------


def _coerce(value, cls):
    if isinstance(value, cls):
        return value
    if isinstance(value, dict):
        return cls(**value)
    raise AdapterError(f"adapter returned {type(value).__name__}, not {cls.__name__} or a dict")


def lookup(call: CallRef, spec: dict, semantic_fields) -> Evidence:
    """Ask the receiver what happened. Raises AdapterError only for a broken configuration."""
    adapter = spec.get("adapter")
    if adapter == "http":
        return http_lookup(call, spec, semantic_fields)
    if adapter == "demo_ledger":
        return demo_lookup(call, semantic_fields)
    if adapter == "python":
        ev = _coerce(_python("lookup", call, spec), Evidence)
        if ev.outcome not in OUTCOMES:
            raise AdapterError(f"python adapter {spec['path']!r} returned outcome {ev.outcome!r}, not one of {', '.join(OUTCOMES)}")
        return ev
    raise AdapterError(f"unknown adapter {adapter!r}")


def execute(call: CallRef, spec: dict) -> Execution:
    """Perform the call again with its idempotency key."""
    adapter = spec.get("adapter")
    if adapter == "http":
        return http_execute(call, spec)
    if adapter == "demo_ledger":
        return demo_execute(call)
    if adapter == "python":
        return _coerce(_python("execute", call, spec), Execution)
    raise AdapterError(f"unknown adapter {adapter!r}")


def compensate(call: CallRef, spec: dict) -> Execution:
    """Run the inverse of the call (its own key, derived from the call's)."""
    adapter = spec.get("adapter")
    inverse = CallRef(call.run_id, call.call_id, call.idempotency_key + ":compensate", call.tool, call.arguments, call.start_seq)
    if adapter == "http":
        return http_execute(inverse, spec)
    if adapter == "python":
        return _coerce(_python("compensate", call, spec), Execution)
    if adapter == "demo_ledger":
        DemoLedgerEntry.objects.filter(idempotency_key=call.idempotency_key).delete()
        return Execution("done", result={"reversed": call.idempotency_key})
    raise AdapterError(f"unknown adapter {adapter!r}")
