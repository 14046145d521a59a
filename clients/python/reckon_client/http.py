"""Reckon's HTTP API with a Bearer token, on the standard library alone.

One keep-alive connection per thread. An outage (connection refused, 502/503/504) is retried with
backoff while the run's lease lasts, never longer: past it the append would be fenced anyway.

An append the transport had to send again (the connection dropped, or Reckon was briefly
unavailable) may have landed the first time with only its answer lost; the repeat is then refused
as a seq conflict. The transport reads the events at those seqs back and takes them as its own
append when they are exactly what it sent; anything else stays the conflict it is.
"""

from __future__ import annotations

import http.client
import json
import logging
import threading
import time
from datetime import datetime
from typing import Any, NamedTuple
from urllib.parse import quote, urlsplit

from reckon_client.errors import BadResponse, ClientError, FenceError, InvalidEvent, LeaseHeld, ReckonError, RunFinished, RunNotFound, SeqConflict, ServerUnavailable, StaleEpoch, TooLarge, WriterRefused
from reckon_client.identity import KEY_SECRET_FIELD
from reckon_client.state import RunState

log = logging.getLogger("reckon_client")

# Payload fields the server fills in when a writer leaves them out.
STORE_FILLED = frozenset({"tenant", "source", "operation_id", KEY_SECRET_FIELD})
_ABSENT = object()

# An outage: retried with backoff while the lease lasts (appends are safe to repeat: the seq fence
# refuses a second copy of one that did land).
_OUTAGE_STATUSES = frozenset({502, 503, 504})
_BACKOFF_FIRST_S, _BACKOFF_MAX_S = 0.1, 1.0


class LeaseInfo(NamedTuple):
    run_id: str
    epoch: int
    holder: str
    last_seq: int


class Event(NamedTuple):
    seq: int
    type: str
    payload: dict
    ts: str | None = None
    v: int | None = None


def api_base(url: str) -> str:
    """Reckon's site URL or its API URL, as the API URL: ``http://host:8000`` and
    ``http://host:8000/api`` both give ``http://host:8000/api``."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"Reckon's URL must be http(s)://host[:port][/path], got {url!r}")
    base = url.rstrip("/")
    return base if base.endswith("/api") else base + "/api"


class HttpTransport:
    """Leases, appends and the folded state over Reckon's HTTP API."""

    def __init__(self, url: str, token: str, *, timeout: float = 10.0):
        if not token:
            raise ValueError("a Reckon API token is needed (the append and read scopes)")
        parts = urlsplit(api_base(url))
        self.scheme, self.host, self.port = parts.scheme, parts.hostname, parts.port
        self.prefix = parts.path.rstrip("/")
        self.token, self.timeout = token, timeout
        self._local = threading.local()
        self._opened: set[http.client.HTTPConnection] = set()  # every thread's connection, for ``close``
        self._opened_lock = threading.Lock()
        self._leases: dict[str, float] = {}  # run id -> monotonic time its lease expires, as last heard

    # --- the wire ---------------------------------------------------------------------------

    def _conn(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
            conn = self._local.conn = cls(self.host, self.port, timeout=self.timeout)
        if conn.sock is None:  # it connects on this request (again, after ``close``): kept for ``close``
            with self._opened_lock:
                self._opened.add(conn)
        return conn

    def _forget(self, conn: http.client.HTTPConnection) -> None:
        conn.close()
        self._local.conn = None
        with self._opened_lock:
            self._opened.discard(conn)

    def _send(self, method: str, path: str, data: bytes | None, headers: dict) -> tuple[int, bytes]:
        for attempt in (1, 2):
            conn = self._conn()
            try:
                conn.request(method, self.prefix + path, body=data, headers=headers)
                resp = conn.getresponse()
                return resp.status, resp.read()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                # A keep-alive connection the server closed while idle: retry once on a fresh one.
                # (Or one dropped after the server got the request: the caller learns it was resent.)
                self._forget(conn)
                if attempt == 2:
                    raise
                self._local.resent = True
            except (OSError, http.client.HTTPException):
                self._forget(conn)
                raise
        raise AssertionError("unreachable")

    def request(self, method: str, path: str, body: Any = None, *, until: float | None = None) -> tuple[int, Any]:
        """Send and decode; an outage is retried with backoff until ``until`` (monotonic; default
        now + timeout), then ``ServerUnavailable``. Any answer that is not JSON is ``BadResponse``."""
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        until = time.monotonic() + self.timeout if until is None else until
        delay, what = _BACKOFF_FIRST_S, f"{method} {path}"
        self._local.resent = False  # set when this request was sent more than once (``append``)
        while True:
            try:
                status, raw = self._send(method, path, data, headers)
            except (OSError, http.client.HTTPException) as exc:
                status, raw, failure = None, str(exc).encode(), exc
            else:
                failure = None
                try:
                    doc = json.loads(raw) if raw else None
                except ValueError:
                    if status < 500:
                        raise BadResponse(what, status=status, body=raw) from None
                else:
                    if status not in _OUTAGE_STATUSES:
                        return status, doc
            if time.monotonic() + delay >= until:
                raise ServerUnavailable(what, status=status, body=raw) from failure
            log.warning("reckon unavailable, retrying", extra={"what": what, "status": status, "retry_in_s": delay})
            time.sleep(delay)
            self._local.resent = True
            delay = min(delay * 2, _BACKOFF_MAX_S)

    def _until(self, run_id: str) -> float | None:
        # Never retry past the lease this client last heard of: after it, the append would be fenced.
        return self._leases.get(run_id)

    def _leased(self, run_id: str, ttl: float, sent: float) -> None:
        self._leases[run_id] = sent + float(ttl)

    def _check(self, status: int, doc: Any, what: str) -> Any:
        if status < 300:
            return doc
        if status == 409 and not isinstance(doc, dict):
            raise BadResponse(what, status=status, body=json.dumps(doc).encode())
        detail = (doc or {}).get("detail", "") if isinstance(doc, dict) else str(doc)
        code = (doc or {}).get("code") if isinstance(doc, dict) else None
        if status == 409:
            run_id = doc.get("run_id") or ""
            if code == "lease_held":
                expires = doc.get("expires_at")
                expires = datetime.fromisoformat(expires.replace("Z", "+00:00")) if expires else None
                raise LeaseHeld(detail, run_id=run_id, holder=doc.get("holder") or "", epoch=doc.get("current_epoch") or 0, expires_at=expires)
            cur, last = doc.get("current_epoch") or 0, doc.get("last_seq") or 0
            cls = {"stale_epoch": StaleEpoch, "seq_conflict": SeqConflict, "run_finished": RunFinished}.get(code, FenceError)
            raise cls(detail, run_id=run_id, current_epoch=cur, last_seq=last)
        if status == 403 and isinstance(doc, dict) and doc.get("type"):
            raise WriterRefused(f"{what}: {detail}")
        if status == 404:
            raise RunNotFound(f"{what}: {detail or 'not found'}")
        if status == 413:
            raise TooLarge(f"{what}: {detail or 'too large'}", limit=doc.get("limit") if isinstance(doc, dict) else None, setting=doc.get("setting") if isinstance(doc, dict) else None, seq=doc.get("seq") if isinstance(doc, dict) else None)
        if status == 422:
            raise InvalidEvent(detail)
        raise ClientError(f"{what}: HTTP {status}: {detail}")

    def _path(self, run_id: str, tail: str = "") -> str:
        return f"/runs/{quote(run_id, safe='')}{tail}"

    # --- what a transport does --------------------------------------------------------------

    def acquire(self, run_id: str, holder: str, ttl: float, tenant: str | None) -> LeaseInfo:
        body = {"holder": holder, "ttl_seconds": ttl, **({"tenant": tenant} if tenant else {})}
        sent = time.monotonic()
        doc = self._check(*self.request("POST", self._path(run_id, "/lease"), body), run_id)
        self._leased(run_id, ttl, sent)
        return self._lease_info(run_id, doc)

    def renew(self, run_id: str, epoch: int, ttl: float) -> LeaseInfo:
        sent = time.monotonic()
        doc = self._check(*self.request("POST", self._path(run_id, "/lease/renew"), {"epoch": epoch, "ttl_seconds": ttl}, until=self._until(run_id)), run_id)
        self._leased(run_id, ttl, sent)
        return self._lease_info(run_id, doc)

    def _lease_info(self, run_id: str, doc: Any) -> LeaseInfo:
        try:
            return LeaseInfo(run_id, doc["epoch"], doc["holder"], doc["last_seq"])
        except (TypeError, KeyError) as exc:
            raise BadResponse(f"lease of {run_id}: no {exc}", status=200, body=json.dumps(doc).encode()) from None

    def release(self, run_id: str, epoch: int) -> None:
        self._check(*self.request("POST", self._path(run_id, "/lease/release"), {"epoch": epoch}, until=self._until(run_id)), run_id)
        self._leases.pop(run_id, None)

    def state(self, run_id: str) -> dict | None:
        """The run's folded state as the server computes it (snapshot plus tail), with its key
        secret for an append token; None for a run with no events yet."""
        status, doc = self.request("GET", self._path(run_id, "/state"), until=self._until(run_id))
        if status == 404:
            return None
        doc = self._check(status, doc, run_id)
        if not isinstance(doc, dict) or not isinstance(doc.get("last_seq"), int):
            raise BadResponse(f"state of {run_id}: not a run state", status=status, body=json.dumps(doc).encode())
        return doc

    def opened(self, run_id: str) -> tuple[RunState, list[dict]]:
        """What ``open_run`` starts from: the state above and the stale observations it lists."""
        state = RunState.from_document(run_id, self.state(run_id))
        return state, state.stale_observations

    def append(self, run_id: str, epoch: int, expected_seq: int, events: list[dict]) -> list[Event]:
        body = {"epoch": epoch, "expected_seq": expected_seq, "events": events}
        status, doc = self.request("POST", self._path(run_id, "/events"), body, until=self._until(run_id))
        if status == 409 and self._local.resent and isinstance(doc, dict) and doc.get("code") == "seq_conflict":
            # Sent more than once (a dropped connection, an outage): the first copy may have landed
            # and only its answer been lost. The events at those seqs, if they are exactly ours, are.
            mine = self._appended_before(run_id, expected_seq, events)
            if mine is not None:
                log.info("append acknowledged by reading it back", extra={"run_id": run_id, "first_seq": expected_seq + 1})
                return mine
        doc = self._check(status, doc, run_id)
        try:
            first = doc["first_seq"]
        except (TypeError, KeyError):
            raise BadResponse(f"append to {run_id}: no first_seq", status=201, body=json.dumps(doc).encode()) from None
        out = [Event(first + i, e["type"], e["payload"]) for i, e in enumerate(events)]
        if first == 1 and doc.get(KEY_SECRET_FIELD):
            # The server gave the new run its key secret; the run keeps it for its keys.
            out[0] = out[0]._replace(payload={**out[0].payload, KEY_SECRET_FIELD: doc[KEY_SECRET_FIELD]})
        return out

    def _appended_before(self, run_id: str, expected_seq: int, events: list[dict]) -> list[Event] | None:
        """The stored events at seqs ``expected_seq + 1 ...`` when they are ``events`` (same types,
        every field sent stored unchanged, nothing added but what the server fills in), else None.

        Only the holder of the run's current epoch can have appended there (a seq conflict, not a
        stale epoch, was the answer), so identical events at those seqs are this client's own append.
        """
        try:
            status, doc = self.request("GET", self._path(run_id, f"/events?after={expected_seq}&limit={len(events)}"), until=self._until(run_id))
            stored = self._check(status, doc, run_id)["events"]
        except (ReckonError, TypeError, KeyError):
            return None
        if len(stored) != len(events):
            return None
        for sent, got in zip(events, stored):
            mine = json.loads(json.dumps(sent["payload"]))
            theirs = got.get("payload") if isinstance(got, dict) else None
            if not isinstance(theirs, dict) or got.get("type") != sent["type"]:
                return None
            if any(theirs.get(k, _ABSENT) != v for k, v in mine.items()) or not set(theirs) - set(mine) <= STORE_FILLED:
                return None
        return [Event(e["seq"], e["type"], e["payload"], e.get("ts"), e.get("v")) for e in stored]

    def events(self, run_id: str) -> list[Event]:
        """Every event of the run, by page (for tools and tests; ``open_run`` asks for the state)."""
        out: list[Event] = []
        after = 0
        while True:
            status, doc = self.request("GET", self._path(run_id, f"/events?after={after}&limit=1000"))
            if status == 404:
                return out
            doc = self._check(status, doc, run_id)
            out.extend(Event(e["seq"], e["type"], e["payload"], e.get("ts"), e.get("v")) for e in doc["events"])
            if doc["next_after"] is None:
                return out
            after = doc["next_after"]

    def close_thread(self) -> None:
        """Close the calling thread's connection (a thread that is done with the transport)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            self._forget(conn)

    def close(self) -> None:
        """Close every connection this transport opened, in any thread; it opens new ones if used again."""
        with self._opened_lock:
            opened, self._opened = self._opened, set()
        for conn in opened:
            conn.close()

    def __enter__(self) -> "HttpTransport":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
