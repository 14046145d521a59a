"""Machine tokens of the HTTP API.

``ApiToken`` keeps only the sha256 of a token's secret: the secret is shown once, when an
administrator creates it, and a database dump never yields a usable credential. Secrets are 32
random bytes, so a plain sha256 (not a slow password hash) is enough and lets a request find its
token with one indexed lookup.
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
