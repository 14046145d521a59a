"""Idempotency records of the HTTP API.

``IdempotencyRecord`` stores the first response to a request that carried an ``Idempotency-Key``
header, keyed by who sent it, as Stripe does: the same key with the same body gets that response
again, the same key with another body is refused.
"""

from __future__ import annotations

from django.db import models
from django.db.models.functions import Now


class IdempotencyRecord(models.Model):
    owner = models.CharField(max_length=100, help_text="token:<id> or user:<id>: keys are per sender")
    key = models.CharField(max_length=255)
    fingerprint = models.CharField(max_length=64, help_text="sha256 of method, path and body")
    status_code = models.PositiveSmallIntegerField(null=True, blank=True, help_text="null while the first request runs")
    response = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "reckon_idempotency"
        constraints = [models.UniqueConstraint(fields=["owner", "key"], name="reckon_idempotency_owner_key_uniq")]
