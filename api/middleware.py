"""Every answer under /api/ is JSON, even for failures that happen outside an API operation.

api.errors maps what an operation raises. Some failures never reach an operation's handlers: a
database that is down while a middleware loads the session, a body over DATA_UPLOAD_MAX_MEMORY_SIZE
read before the view, an exception Django turns into its HTML 500 page. This middleware gives those
the same ``{"detail", "code"}`` document (and a 503 its Retry-After), so a client of the API never
has to parse HTML.
"""

from __future__ import annotations

import logging

from django.core.exceptions import RequestDataTooBig
from django.db import InterfaceError, OperationalError
from django.http import JsonResponse

from api.errors import UNAVAILABLE, error_headers, too_large_detail

log = logging.getLogger("reckon.api")

_CODES = {400: "bad_request", 403: "forbidden", 404: "not_found", 405: "method_not_allowed", 413: "too_large", 500: "internal", 503: "unavailable"}


def _json_error(status: int, detail: str, code: str) -> JsonResponse:
    response = JsonResponse({"detail": detail, "code": code}, status=status)
    for name, value in error_headers(status).items():
        response[name] = value
    return response


def _is_api(request) -> bool:
    return request.path.startswith("/api/")


class ApiErrorsMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if not _is_api(request) or response.status_code < 400 or response.get("Content-Type", "").startswith("application/json"):
            return response
        # An HTML or plain-text error page from Django (its 500 page, a CSRF 403, a 400 for a
        # suspicious request): its text is for a person, so only the status is kept.
        status = response.status_code
        answer = _json_error(status, f"the request failed with HTTP {status} ({response.reason_phrase})", _CODES.get(status, "error"))
        if status == 405 and response.has_header("Allow"):
            # ninja's 405 names the path's methods (RFC 9110 requires it): kept with the JSON body.
            answer["Allow"] = response["Allow"]
        return answer

    def process_exception(self, request, exc):
        if not _is_api(request):
            return None
        if isinstance(exc, (OperationalError, InterfaceError)):
            log.warning("api answered 503: %s: %s", type(exc).__name__, exc)
            return _json_error(503, UNAVAILABLE, "unavailable")
        if isinstance(exc, RequestDataTooBig):
            return _json_error(413, too_large_detail(), "too_large")
        return None
