"""Every error the HTTP API answers with, in one table: exception -> status, code and extra fields.

Each entry is registered as an exception handler on the API (``errors_register``), so a domain
error raised anywhere below (the store's fence, a lease held by someone else, a stale decision) is
mapped to its status exactly once, whichever router raised it. The answer is always the JSON
document the operation declares for that status (``api.schemas.Error`` or ``Conflict``), so
nothing a caller sends ends in an HTML page or a 500.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Callable

from django.core.exceptions import RequestDataTooBig
from django.db import InterfaceError, OperationalError
from django.http import Http404, HttpRequest
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, Throttled, ValidationError

from access.assignment import NotAssignable
from recovery.errors import CallNotFound, InvalidDecision, NotDecidable, RecoveryError, RunBusy, StaleDecision
from recovery.policies import PolicyError
from recovery.selectors import QueryError
from access.tokens import owner_name
from runs.errors import EventTooLarge, FenceError, InvalidEvent, LeaseHeld, RunNotFound, RunTooLarge, StaleEpoch, TooLarge, WriterRefused
from runs.leases import lease_owner_of
from runs.fold import FoldError
from runs.json_strict import JsonRefused
from runs.upcasters import UnsupportedVersion


log = logging.getLogger("reckon.api")


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


def _fence_fields(exc: FenceError, request: HttpRequest) -> dict:
    # The current epoch is its owner's to write with: an answer shows it to the caller that
    # acquired it (a seq conflict, or a writer that holds a newer epoch of its own), to nobody else.
    doc = {"run_id": exc.run_id, "last_seq": exc.last_seq}
    owner = getattr(getattr(request, "auth", None), "owner", None)
    if owner is not None and lease_owner_of(run_id=exc.run_id, epoch=exc.current_epoch) == owner:
        doc["current_epoch"] = exc.current_epoch
    return doc


def _lease_fields(exc: LeaseHeld, request: HttpRequest) -> dict:
    # Who holds it and until when, never the epoch (runs.errors.LeaseHeld).
    return {"run_id": exc.run_id, "holder": exc.holder, "held_by": owner_name(exc.owner), "expires_at": exc.expires_at}


def _fence_detail(exc: FenceError) -> str:
    # A stale epoch is named without the current one (_fence_fields says to whom that is shown).
    if isinstance(exc, StaleEpoch):
        return f"stale epoch for run {exc.run_id!r}: epoch {exc.epoch} " + ("was released" if exc.current_epoch == exc.epoch else "is no longer the run's lease")
    return str(exc)


def _fence_code(exc: FenceError) -> str:
    # StaleEpoch, SeqConflict and RunFinished: the store already logged and recorded the refusal.
    return {"StaleEpoch": "stale_epoch", "SeqConflict": "seq_conflict", "RunFinished": "run_finished"}.get(type(exc).__name__, "fenced")


def _size_fields(exc: TooLarge) -> dict:
    return {"limit": exc.limit, "setting": exc.setting, "seq": exc.seq}


def _validation_detail(exc: ValidationError) -> str:
    where = "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg', 'invalid')}" for e in exc.errors[:5])
    return f"invalid request: {where}"


def _validation_fields(exc: ValidationError, request: HttpRequest) -> dict:
    return {"errors": [{"loc": [str(p) for p in e.get("loc", ())], "msg": str(e.get("msg", "")), "type": str(e.get("type", ""))} for e in exc.errors]}


def _body_refused(exc: HttpError) -> JsonRefused | None:
    # django-ninja wraps whatever the body parser raises in HttpError(400, "Cannot parse request
    # body"); the parser's own reason (runs.json_strict, naming the field) is the cause.
    return exc.__cause__ if isinstance(exc.__cause__, JsonRefused) else None


def _http_detail(exc: HttpError) -> str:
    refused = _body_refused(exc)
    return f"the request body cannot be used: {refused}" if refused else str(exc)


def _http_code(exc: HttpError) -> str:
    return "invalid_body" if _body_refused(exc) else "error"


Code = str | Callable[[Exception], str]


# exception -> (status, code or a function of the exception, detail function, extra fields function).
# A subclass listed after its base still gets its own entry: handlers are looked up by the
# exception's class first (django-ninja walks the MRO).
TABLE: list[tuple[type[Exception], int, Code, Callable[[Any], str] | None, Callable[[Any, HttpRequest], dict] | None]] = [
    (AuthenticationError, 401, "unauthenticated", lambda e: "authentication required: a Bearer token or a signed-in session", None),
    (Forbidden, 403, "forbidden", None, None),
    (WriterRefused, 403, "forbidden", None, lambda e, r: {"type": e.type_name}),
    (RunNotFound, 404, "not_found", None, None),
    (NotFound, 404, "not_found", None, None),
    (CallNotFound, 404, "not_found", None, None),
    (Http404, 404, "not_found", lambda e: str(e) or "not found", None),
    (FenceError, 409, _fence_code, _fence_detail, _fence_fields),
    (LeaseHeld, 409, "lease_held", lambda e: f"{e} (acquired by {owner_name(e.owner)})", _lease_fields),
    (Conflicted, 409, lambda e: e.code, None, None),
    (StaleDecision, 409, "stale_decision", None, None),
    (NotDecidable, 409, "not_decidable", None, lambda e, r: {"state": e.state}),
    (RunBusy, 409, "run_busy", None, None),
    # Over a size limit (runs/store.py): 413, naming the limit in bytes and the setting that holds it.
    (EventTooLarge, 413, "event_too_large", None, lambda e, r: _size_fields(e)),
    (RunTooLarge, 413, "run_too_large", None, lambda e, r: _size_fields(e)),
    (InvalidEvent, 422, "invalid", None, None),
    (Unprocessable, 422, "invalid", None, None),
    (UnsupportedVersion, 422, "unsupported_version", None, None),
    (FoldError, 422, "unfoldable", None, None),
    (InvalidDecision, 422, "invalid_decision", None, None),
    (NotAssignable, 422, "not_assignable", None, None),
    (RecoveryError, 422, "refused", None, None),
    (PolicyError, 422, "invalid_policy", None, None),
    (QueryError, 422, "invalid", None, None),
    (ValidationError, 422, "invalid", _validation_detail, _validation_fields),
    (Throttled, 429, "throttled", lambda e: getattr(e, "reason", "too many requests: retry after the number of seconds in Retry-After"), lambda e, r: {"retry_after": math.ceil(e.wait) if e.wait is not None else None}),
    (HttpError, None, _http_code, _http_detail, None),  # its own status (e.g. 400 for a body that is not JSON)
    (RequestDataTooBig, 413, "too_large", lambda e: too_large_detail(), None),
    (OperationalError, 503, "unavailable", lambda e: UNAVAILABLE, None),
    (InterfaceError, 503, "unavailable", lambda e: UNAVAILABLE, None),
]

# The database's own message names hosts and ports: it goes to the log, never to the caller.
UNAVAILABLE = "the database is unavailable; try again shortly"
RETRY_AFTER_S = 5


def too_large_detail() -> str:
    from django.conf import settings

    return f"the request body is larger than {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes (DATA_UPLOAD_MAX_MEMORY_SIZE), the limit RECKON_MAX_REQUEST_BYTES sets"


def error_headers(status: int) -> dict[str, str]:
    """Headers an error answer carries besides its body: a 503 says when to come back."""
    return {"Retry-After": str(RETRY_AFTER_S)} if status == 503 else {}


def errors_register(api: NinjaAPI) -> None:
    """Register one handler per row of ``TABLE`` on ``api``."""
    for exc_class, status, code, detail, extra in TABLE:

        def handler(request: HttpRequest, exc, status=status, code=code, detail=detail, extra=extra):
            doc = {
                "detail": detail(exc) if detail else str(exc),
                "code": code(exc) if callable(code) else code,
                **(extra(exc, request) if extra else {}),
            }
            if status == 503:
                log.warning("api answered 503: %s: %s", type(exc).__name__, exc)
            response = api.create_response(request, doc, status=status or exc.status_code)
            for name, value in error_headers(response.status_code).items():
                response[name] = value
            if isinstance(exc, Throttled) and exc.wait is not None:
                response["Retry-After"] = str(math.ceil(exc.wait))  # RFC 9110: whole seconds
            return response

        api.add_exception_handler(exc_class, handler)
