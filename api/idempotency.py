"""``Idempotency-Key`` for API writes, as Stripe does it.

The first request with a key claims it (a row with no response yet), runs, and stores its status
and body, errors included: a repeat with the same key and the same method, path and body gets the
stored response back (marked ``Idempotent-Replayed: true``) and changes nothing. The same key with
a different request is refused with 422, naming the key. A repeat that arrives while the first is
still running gets 409; a claim left behind by a process that died mid-request is taken over after
``STALE_AFTER``. A 5xx is not stored, so the caller can retry it with the same key.

Keys are per sender (a token or a console user), so two callers cannot collide or read each other's
responses.
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import timedelta
from typing import Any, Callable

from django.db import IntegrityError, transaction
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from ninja import Status

from access.tokens import Principal
from api.errors import Conflicted, Unprocessable
from api.instance import api
from api.models import IdempotencyRecord
from api.schemas import IDEMPOTENCY_KEY_PATTERN

STALE_AFTER = timedelta(seconds=120)
_KEY = re.compile(IDEMPOTENCY_KEY_PATTERN)


def _fingerprint(request: HttpRequest, body: Any) -> str:
    doc = json.dumps([request.method, request.path, body], sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(doc.encode()).hexdigest()


def _replay(request: HttpRequest, rec: IdempotencyRecord) -> HttpResponse:
    response = api.create_response(request, rec.response, status=rec.status_code)
    response["Idempotent-Replayed"] = "true"
    return response


def idempotent(request: HttpRequest, *, principal: Principal, key: str | None, body: Any, run: Callable[[], tuple[int, Any]]):
    """Run ``run`` at most once per (sender, key); see the module docstring."""
    if key is None:
        status, doc = run()
        return Status(status, doc)
    if not _KEY.match(key):
        raise Unprocessable("Idempotency-Key must be 1 to 255 printable ASCII characters without spaces")
    fingerprint = _fingerprint(request, body)
    try:
        with transaction.atomic():
            rec = IdempotencyRecord.objects.create(owner=principal.owner, key=key, fingerprint=fingerprint)
    except IntegrityError:
        rec = IdempotencyRecord.objects.get(owner=principal.owner, key=key)
        if rec.fingerprint != fingerprint:
            raise Unprocessable(f"Idempotency-Key {key!r} was already used with a different request; use a new key for a new request") from None
        if rec.status_code is not None:
            return _replay(request, rec)
        # Still running, or left behind by a process that died: take it over only once stale.
        taken = IdempotencyRecord.objects.filter(pk=rec.pk, status_code__isnull=True, created_at__lt=timezone.now() - STALE_AFTER).update(
            created_at=timezone.now()
        )
        if not taken:
            raise Conflicted(f"a request with Idempotency-Key {key!r} is still being processed; retry shortly", code="idempotency_in_progress") from None
    try:
        status, doc = run()
    except Exception as exc:
        try:
            response = api.on_exception(request, exc)
        except Exception:
            IdempotencyRecord.objects.filter(pk=rec.pk).delete()  # a 5xx: let the caller retry the key
            raise
        if response.status_code >= 500:
            IdempotencyRecord.objects.filter(pk=rec.pk).delete()
            return response
        IdempotencyRecord.objects.filter(pk=rec.pk).update(status_code=response.status_code, response=json.loads(response.content))
        return response
    response = api.create_response(request, doc, status=status)  # stored exactly as it was sent
    IdempotencyRecord.objects.filter(pk=rec.pk).update(status_code=status, response=json.loads(response.content))
    return Status(status, doc)
