"""What every router of the HTTP API shares: the error schemas, the statuses each operation
documents, and the checks of names and tenants."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from ninja import Field, Schema

from access.tokens import Principal
from api.errors import Forbidden, Unprocessable
from runs.json_strict import json_problem
from runs.run_ids import run_id_problem


class Error(Schema):
    detail: str
    code: str
    errors: list[dict[str, Any]] | None = None
    retry_after: int | None = None  # 429: seconds until the caller may try again (also in Retry-After)
    # 413 for an event or a run over its size limit: the limit in bytes, the setting that holds it,
    # and the seq of the first event that does not fit.
    limit: int | None = None
    setting: str | None = None
    seq: int | None = None


class Conflict(Schema):
    """A write refused by the current state: the values the caller needs to decide what to do."""

    detail: str
    code: str
    run_id: str | None = None
    current_epoch: int | None = None
    last_seq: int | None = None
    holder: str | None = None
    expires_at: datetime | None = None
    state: str | None = Field(None, description="not_decidable: the call's state (in_flight or resolved)")


def responses(ok: dict[int, Any]) -> dict[int, Any]:
    """``ok`` plus every error status an operation can answer with, each with its schema (400: a body
    that is not JSON at all; 422: JSON that does not fit; 429: too many failed tokens from one address,
    or more requests than the token's rate; 413: a body, an event or a run over its size limit)."""
    return {**ok, 400: Error, 401: Error, 403: Error, 404: Error, 409: Conflict, 413: Error, 422: Error, 429: Error}


# A holder, tenant or tool name: 1 to 200 characters, none a control character. The pattern is
# stated in the OpenAPI document (api/openapi_rules.py) and checked here, from the one text.
NAME_PATTERN = r"^[^\x00-\x1f\x7f]{1,200}$"
_NAME = re.compile(NAME_PATTERN)
# An Idempotency-Key (api.idempotency): printable ASCII, no spaces, as HTTP header tokens.
IDEMPOTENCY_KEY_PATTERN = r"^[\x21-\x7e]{1,255}$"


def clean_name(value: str, what: str) -> str:
    """A run id, holder or tenant as given, or Unprocessable naming what is wrong with it. A run id
    follows the one rule of runs.run_ids, so what the API accepts the importer and the client accept."""
    if what == "run id":
        problem = run_id_problem(value)
        if problem:
            raise Unprocessable(problem)
        return value
    if not _NAME.fullmatch(value) or json_problem(value):
        raise Unprocessable(f"{what} must be 1 to 200 characters with no control characters or lone surrogates, got {value[:60]!r}")
    return value


def require_tenants(principal: Principal, tenants: set[str], what: str) -> None:
    """403 unless the principal may touch every one of ``tenants``."""
    if not principal.may_see(tenants):
        outside = sorted(tenants - set(principal.tenants or ()))
        raise Forbidden(f"{what} belongs to tenant {', '.join(outside)}, which this token may not touch")


def request_route(request) -> str:
    """What an access record names as the reason for an API read: the method and the path asked."""
    return f"{request.method} {request.get_full_path()}"
