"""Authentication of the HTTP API: a machine token or a console session, and the scope each
operation needs.

Authentication accepts a machine token (``Authorization: Bearer rk_...``) or a console session.
The session path checks CSRF on unsafe methods itself, and only for a signed-in user, so a request
with no credentials at all gets 401 (never a CSRF 403). A caller who is known but lacks the scope
gets 403. Scopes are per operation: ``auth=caller("read")``. An address that presents too many
wrong tokens gets 429 with Retry-After until its window ends (api/throttles.py).
"""

from __future__ import annotations

from django.http import HttpRequest
from ninja.security import APIKeyCookie, HttpBearer
from ninja.utils import check_csrf

from access.tokens import Principal, principal_for_token, principal_for_user, token_authenticate
from api.errors import Forbidden
from api.throttles import auth_failure_record, auth_failures_check

_SAFE = {"GET", "HEAD", "OPTIONS", "TRACE"}


def token_principal(request: HttpRequest, secret: str) -> Principal | None:
    """The principal of a Bearer token's secret, or None for a wrong one, which counts toward the
    address's failed-token limit; an address over that limit gets ``TooManyRequests`` (429) before
    the token is looked up (api/throttles.py). The one check of a token for the API and /metrics."""
    auth_failures_check(request)
    found = token_authenticate(secret=secret.strip())
    if found is None:
        auth_failure_record(request)
        return None
    return principal_for_token(found)


class _TokenAuth(HttpBearer):
    def __init__(self, scope: str):
        self.scope = scope
        super().__init__()

    def authenticate(self, request: HttpRequest, token: str) -> Principal | None:
        principal = token_principal(request, token)
        if principal is None:
            return None
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
