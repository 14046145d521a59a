"""What every router of the HTTP API shares: authentication, the error schemas, and the status
codes each operation documents.

Authentication accepts a machine token (``Authorization: Bearer rk_...``) or a console session.
The session path checks CSRF on unsafe methods itself, and only for a signed-in user, so a request
with no credentials at all gets 401 (never a CSRF 403). A caller who is known but lacks the scope
gets 403. Scopes are per operation: ``auth=caller("read")``.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from django.http import HttpRequest
from ninja import Schema
from ninja.security import APIKeyCookie, HttpBearer
from ninja.utils import check_csrf

from console.tokens import Principal, principal_for_token, principal_for_user, token_authenticate

_SAFE = {"GET", "HEAD", "OPTIONS", "TRACE"}


class Forbidden(Exception):
    """The caller is known but may not do this (scope, tenant, role): 403."""


class NotFound(Exception):
    """A named thing that does not exist, or that the caller may not know exists: 404."""


class Unprocessable(Exception):
    """A request that is well-formed JSON but cannot be applied as given: 422."""


class Conflicted(Exception):
    """A request refused because of the current state of something (not of the run's fence): 409."""

    def __init__(self, message: str, *, code: str = "conflict"):
        self.code = code
        super().__init__(message)


class _TokenAuth(HttpBearer):
    def __init__(self, scope: str):
        self.scope = scope
        super().__init__()

    def authenticate(self, request: HttpRequest, token: str) -> Principal | None:
        found = token_authenticate(secret=token.strip())
        if found is None:
            return None
        principal = principal_for_token(found)
        if self.scope not in principal.scopes:
            raise Forbidden(f"this token has no {self.scope!r} scope (it has {', '.join(sorted(principal.scopes)) or 'none'})")
        return principal


class _SessionAuth(APIKeyCookie):
    param_name = "sessionid"

    def __init__(self, scope: str):
        self.scope = scope
        super().__init__(csrf=False)

    def __call__(self, request: HttpRequest) -> Principal | None:
        user = getattr(request, "user", None)
        if user is None or not user.is_authenticated:
            return None
        if request.method not in _SAFE and check_csrf(request):
            raise Forbidden("CSRF check failed: send the csrftoken cookie's value in the X-CSRFToken header")
        principal = principal_for_user(user)
        if self.scope not in principal.scopes:
            raise Forbidden(f"your role does not allow {self.scope!r}")
        return principal

    def authenticate(self, request, key):  # pragma: no cover - __call__ does the work
        return None


def caller(scope: str) -> list:
    """The auth list for an operation that needs ``scope``: a token first, then a session."""
    return [_TokenAuth(scope), _SessionAuth(scope)]


# --- schemas shared by every router ---------------------------------------------------------


class Error(Schema):
    detail: str
    code: str
    errors: list[dict[str, Any]] | None = None


class Conflict(Schema):
    """A write refused by the current state: the values the caller needs to decide what to do."""

    detail: str
    code: str
    run_id: str | None = None
    current_epoch: int | None = None
    last_seq: int | None = None
    holder: str | None = None
    expires_at: datetime | None = None


def responses(ok: dict[int, Any]) -> dict[int, Any]:
    """``ok`` plus every error status an operation can answer with, each with its schema (400: a body
    that is not JSON at all; 422: JSON that does not fit)."""
    return {**ok, 400: Error, 401: Error, 403: Error, 404: Error, 409: Conflict, 422: Error}


_BAD_TEXT = re.compile(r"[\x00-\x1f\x7f]")


def clean_name(value: str, what: str) -> str:
    """A run id, holder or tenant as given, or Unprocessable naming what is wrong with it."""
    if not value or len(value) > 200 or _BAD_TEXT.search(value):
        raise Unprocessable(f"{what} must be 1 to 200 characters with no control characters, got {value[:60]!r}")
    return value


def require_tenants(principal: Principal, tenants: set[str], what: str) -> None:
    """403 unless the principal may touch every one of ``tenants``."""
    if not principal.may_see(tenants):
        outside = sorted(tenants - set(principal.tenants or ()))
        raise Forbidden(f"{what} belongs to tenant {', '.join(outside)}, which this token may not touch")


def mask_fields(principal: Principal) -> frozenset[str]:
    """Argument names to mask for this caller: none for a user with view_sensitive, none for an
    agent's token (``append`` scope: it wrote these values, and a resumed run must fold exactly what
    the live run had, or its context and keys would differ), the policies' sensitive fields for
    every other caller."""
    from console.selectors import mask_for, sensitive_fields

    if principal.user is not None:
        return mask_for(principal.user)
    if "append" in principal.scopes:
        return frozenset()
    return sensitive_fields()


def masked(value: Any, fields: frozenset[str]) -> Any:
    from console.selectors import value_mask

    return value_mask(value, fields)
