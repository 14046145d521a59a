"""Tables of the HTTP API: machine tokens, idempotency records and the tenant read model of runs.

``ApiToken`` keeps only the sha256 of a token's secret: the secret is shown once, when an
administrator creates it, and a database dump never yields a usable credential. Secrets are 32
random bytes, so a plain sha256 (not a slow password hash) is enough and lets a request find its
token with one indexed lookup.

``IdempotencyRecord`` stores the first response to a request that carried an ``Idempotency-Key``
header, keyed by who sent it, as Stripe does: the same key with the same body gets that response
again, the same key with another body is refused.

``RunTenant`` is a read model kept by a projector inside every append's transaction: the tenants a
run's events name. Token tenant limits are checked against it.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models.functions import Now


class ApiToken(models.Model):
    class Scope(models.TextChoices):
        APPEND = "append", "append events under a lease (agents)"
        READ = "read", "read runs, events, uncertain calls, policies and metrics"
        DECIDE = "decide", "record decisions on uncertain calls"

    name = models.CharField(max_length=200, help_text="who or what uses it, e.g. 'billing-agent prod'")
    prefix = models.CharField(max_length=16, help_text="the first characters of the secret, to recognise it")
    secret_sha256 = models.CharField(max_length=64, unique=True)
    scopes = models.JSONField(default=list, help_text="any of append, read, decide")
    tenants = models.JSONField(default=list, blank=True, help_text="tenants it may touch; empty means all")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(db_default=Now())
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "reckon_api_token"
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"


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


class RunTenant(models.Model):
    run_id = models.CharField(max_length=200)
    tenant = models.CharField(max_length=200)

    class Meta:
        db_table = "reckon_run_tenant"
        constraints = [models.UniqueConstraint(fields=["run_id", "tenant"], name="reckon_run_tenant_uniq")]
        indexes = [models.Index(fields=["tenant", "run_id"], name="reckon_run_tenant_by_tenant")]
