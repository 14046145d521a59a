"""Rate limits of the HTTP API: a client address that keeps failing token authentication, and a
token that sends more than its rate, both answered with 429 and Retry-After.

Both count in fixed windows kept in Django's cache, so every gunicorn worker of a deployment
shares one count when the cache is Redis (settings: ``REDIS_URL``). On Redis a count is one round
trip (``SET NX EX`` and ``INCR`` in one MULTI), and the failure check one ``GET``: every token
request pays both, so they are kept to two (the cache API's ``add`` and ``incr`` took three, since
Django's ``incr`` asks ``EXISTS`` first; under load the agents' appends waited on them more than on
their own commit). A fixed window lets a client send up to twice its limit
across a window boundary; for a limit meant to stop guessing at hundreds of requests a second that
is close enough, and it costs one counter per client instead of a list of timestamps.

Limits are settings, read on every request (so a test can change them):
``RECKON_API_AUTH_FAILURES`` per ``RECKON_API_AUTH_WINDOW_S`` for failed tokens from one address,
``RECKON_API_TOKEN_RATE`` per ``RECKON_API_TOKEN_WINDOW_S`` for one token (0: no limit).
"""

from __future__ import annotations

import hashlib
import ipaddress
import math
import threading
import time

from django.conf import settings
from django.core.cache import cache, caches
from django.core.cache.backends.redis import RedisCache
from django.http import HttpRequest
from ninja.errors import Throttled
from ninja.throttling import BaseThrottle


def client_address(request: HttpRequest) -> str | None:
    """The client's address: REMOTE_ADDR, or with ``RECKON_PROXY_COUNT`` = N trusted proxies in
    front, the Nth address from the right of X-Forwarded-For (the one the outermost proxy saw).
    django-axes uses this too (``AXES_CLIENT_IP_CALLABLE``), so both limits agree on who a client is.
    None when there is no valid address (a request built in code, as a test client's login is):
    axes stores it in an address column, which PostgreSQL checks."""
    proxies = settings.RECKON_PROXY_COUNT
    forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "")
    if proxies and forwarded:
        hops = [h.strip() for h in forwarded.split(",") if h.strip()]
        if hops and _valid(hops[-min(proxies, len(hops))]):
            return hops[-min(proxies, len(hops))]
    remote = request.META.get("REMOTE_ADDR")
    return remote if remote and _valid(remote) else None


def _valid(address: str) -> bool:
    try:
        ipaddress.ip_address(address)
    except ValueError:
        return False
    return True


def _window(key: str, window_s: int) -> tuple[str, float]:
    """The cache key of the current window for ``key``, and the seconds until that window ends."""
    now = time.time()
    index = int(now // window_s)
    return f"reckon:throttle:{key}:{window_s}:{index}", (index + 1) * window_s - now


def _count(key: str, window_s: int) -> tuple[int, float]:
    """Count one more hit in the current window: (hits so far, seconds left in the window)."""
    full, left = _window(key, window_s)
    backend = caches["default"]  # the instance: ``cache`` is a proxy to it
    if isinstance(backend, RedisCache):
        # The cache's own client and key (prefix, version), so cache.get in _peek reads the same
        # counter: Django stores an int as plain digits, which INCR understands. In one MULTI, the
        # key cannot expire between the SET NX and the INCR (an INCR alone would recreate it with
        # no expiry).
        name = backend.make_and_validate_key(full)
        pipe = backend._cache.get_client(name, write=True).pipeline(transaction=True)
        pipe.set(name, 0, ex=window_s + 1, nx=True)
        pipe.incr(name)
        return pipe.execute()[1], left
    cache.add(full, 0, timeout=window_s + 1)
    try:
        return cache.incr(full), left
    except ValueError:  # evicted between add and incr: this hit starts the window again
        cache.set(full, 1, timeout=window_s + 1)
        return 1, left


def _peek(key: str, window_s: int) -> tuple[int, float]:
    full, left = _window(key, window_s)
    return cache.get(full, 0), left


class TooManyRequests(Throttled):
    """A 429 with Retry-After, raised outside ninja's throttle step (the failed-token limit runs
    inside authentication, which ninja's throttles never see when it fails)."""

    def __init__(self, wait: float, reason: str):
        super().__init__(wait=math.ceil(wait))
        self.reason = reason


def auth_failures_check(request: HttpRequest) -> None:
    """Refuse a token from an address that has failed too often in this window: 429, before the
    token is even looked up, so a guesser learns nothing more until the window ends."""
    limit, window_s = settings.RECKON_API_AUTH_FAILURES, settings.RECKON_API_AUTH_WINDOW_S
    failures, left = _peek(f"authfail:{client_address(request) or 'unknown'}", window_s)
    if failures >= limit:
        raise TooManyRequests(left, f"{failures} failed token attempts from this address within {window_s} s (limit {limit}): retry after the window ends")


def auth_failure_record(request: HttpRequest) -> None:
    _count(f"authfail:{client_address(request) or 'unknown'}", settings.RECKON_API_AUTH_WINDOW_S)


class TokenRateThrottle(BaseThrottle):
    """At most ``RECKON_API_TOKEN_RATE`` requests per token per window; a signed-in console user is
    not limited here (people do not send hundreds of requests a second; sign-in has django-axes).

    The count is keyed by a digest of the token's secret rather than its row id, which a test
    database reuses from one run to the next while Redis still holds the last run's counts.
    One instance serves every thread of a worker, so the wait it reports is kept per thread."""

    def __init__(self):
        self._local = threading.local()

    def allow_request(self, request: HttpRequest) -> bool:
        principal = getattr(request, "auth", None)
        limit = settings.RECKON_API_TOKEN_RATE
        self._local.wait = None
        if not limit or getattr(principal, "kind", None) != "token":
            return True
        secret = request.headers.get("Authorization", "").partition(" ")[2].strip()
        ident = hashlib.sha256(secret.encode()).hexdigest()[:24]
        hits, left = _count(f"token:{ident}", settings.RECKON_API_TOKEN_WINDOW_S)
        if hits > limit:
            self._local.wait = left
            return False
        return True

    def wait(self) -> float | None:
        return getattr(self._local, "wait", None)
