"""The project's HTTP API at /api/ (OpenAPI at /api/openapi.json, docs at /api/docs).

One router per app (runs/api.py, recovery/api.py) added here, and every domain error mapped to a
status exactly once, below. Each handler answers with the schema its operation declares for that
status, so the OpenAPI document describes every response a client can get; nothing a caller sends
should ever end in a 500.
"""

from __future__ import annotations

import logging

import orjson
from django.http import Http404, HttpRequest
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.parser import Parser

from console.api_base import Conflicted, Forbidden, NotFound, Unprocessable
from runs.errors import FenceError, InvalidEvent, LeaseHeld, RunNotFound
from runs.fold import FoldError
from runs.upcasters import UnsupportedVersion

log = logging.getLogger("reckon.api")

class _OrjsonParser(Parser):
    """Request bodies decoded with orjson: a 100-event append spends less time in JSON than in
    validation this way. Stricter than the standard library (no NaN, no lone surrogates, no
    integers beyond 64 bits), which the store would refuse anyway; such a body is a 400."""

    def parse_body(self, request):
        return orjson.loads(request.body)


api = NinjaAPI(
    parser=_OrjsonParser(),
    title="Reckon API",
    version="1",
    description=(
        "Agents append their run logs under a lease; operators read runs, uncertain calls and policies, "
        "and record decisions. Machines authenticate with `Authorization: Bearer <token>`; console users "
        "with their session (and the CSRF token on writes)."
    ),
    urls_namespace="api",
)


def _error(request, status: int, detail: str, code: str, **extra):
    return api.create_response(request, {"detail": detail, "code": code, **extra}, status=status)


@api.exception_handler(AuthenticationError)
def _unauthenticated(request: HttpRequest, exc):
    return _error(request, 401, "authentication required: a Bearer token or a signed-in session", "unauthenticated")


@api.exception_handler(Forbidden)
def _forbidden(request: HttpRequest, exc):
    return _error(request, 403, str(exc), "forbidden")


@api.exception_handler(RunNotFound)
def _run_not_found(request: HttpRequest, exc):
    return _error(request, 404, str(exc), "not_found")


@api.exception_handler(NotFound)
def _not_found(request: HttpRequest, exc):
    return _error(request, 404, str(exc), "not_found")


@api.exception_handler(Http404)
def _http404(request: HttpRequest, exc):
    return _error(request, 404, str(exc) or "not found", "not_found")


@api.exception_handler(FenceError)
def _fenced(request: HttpRequest, exc: FenceError):
    # StaleEpoch, SeqConflict and RunFinished: the store already logged and recorded the refusal.
    code = {"StaleEpoch": "stale_epoch", "SeqConflict": "seq_conflict", "RunFinished": "run_finished"}.get(type(exc).__name__, "fenced")
    return _error(request, 409, str(exc), code, run_id=exc.run_id, current_epoch=exc.current_epoch, last_seq=exc.last_seq)


@api.exception_handler(LeaseHeld)
def _lease_held(request: HttpRequest, exc: LeaseHeld):
    return _error(request, 409, str(exc), "lease_held", run_id=exc.run_id, current_epoch=exc.epoch, holder=exc.holder, expires_at=exc.expires_at)


@api.exception_handler(Conflicted)
def _conflicted(request: HttpRequest, exc: Conflicted):
    return _error(request, 409, str(exc), exc.code)


@api.exception_handler(InvalidEvent)
def _invalid(request: HttpRequest, exc):
    return _error(request, 422, str(exc), "invalid")


@api.exception_handler(Unprocessable)
def _unprocessable(request: HttpRequest, exc):
    return _error(request, 422, str(exc), "invalid")


@api.exception_handler(UnsupportedVersion)
def _unsupported(request: HttpRequest, exc):
    return _error(request, 422, str(exc), "unsupported_version")


@api.exception_handler(FoldError)
def _fold_error(request: HttpRequest, exc):
    return _error(request, 422, str(exc), "unfoldable")


# The recovery engine's refusals. Imported lazily-safe: recovery is an installed app.
from recovery.policies import PolicyError  # noqa: E402
from recovery.selectors import QueryError  # noqa: E402
from recovery.services import CallNotFound, InvalidDecision, RecoveryError, RunBusy, StaleDecision  # noqa: E402


@api.exception_handler(CallNotFound)
def _call_not_found(request: HttpRequest, exc):
    return _error(request, 404, str(exc), "not_found")


@api.exception_handler(StaleDecision)
def _stale_decision(request: HttpRequest, exc: StaleDecision):
    return _error(request, 409, str(exc), "stale_decision")


@api.exception_handler(RunBusy)
def _run_busy(request: HttpRequest, exc):
    return _error(request, 409, str(exc), "run_busy")


@api.exception_handler(InvalidDecision)
def _invalid_decision(request: HttpRequest, exc):
    return _error(request, 422, str(exc), "invalid_decision")


@api.exception_handler(RecoveryError)
def _recovery_error(request: HttpRequest, exc):
    return _error(request, 422, str(exc), "refused")


@api.exception_handler(PolicyError)
def _policy_error(request: HttpRequest, exc):
    return _error(request, 422, str(exc), "invalid_policy")


@api.exception_handler(QueryError)
def _query_error(request: HttpRequest, exc):
    return _error(request, 422, str(exc), "invalid")


@api.exception_handler(ValidationError)
def _validation(request: HttpRequest, exc: ValidationError):
    where = "; ".join(
        f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg', 'invalid')}" for e in exc.errors[:5]
    )
    errors = [{"loc": [str(p) for p in e.get("loc", ())], "msg": str(e.get("msg", "")), "type": str(e.get("type", ""))} for e in exc.errors]
    return _error(request, 422, f"invalid request: {where}", "invalid", errors=errors)


@api.exception_handler(HttpError)
def _http_error(request: HttpRequest, exc: HttpError):
    return _error(request, exc.status_code, str(exc), "error")


from runs.api import router as runs_router  # noqa: E402

api.add_router("/", runs_router)

from recovery.api import router as recovery_router  # noqa: E402

api.add_router("/", recovery_router)


def api_not_found(request: HttpRequest, rest: str = ""):
    """Any other path under /api/: a JSON 404 rather than the console's HTML page."""
    from django.http import JsonResponse

    return JsonResponse({"detail": f"no API operation at /api/{rest}", "code": "not_found"}, status=404)
