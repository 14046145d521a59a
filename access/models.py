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
from django.utils import timezone


class ApiToken(models.Model):
    class Scope(models.TextChoices):
        APPEND = "append", "append events under a lease (agents)"
        READ = "read", "read runs, events, uncertain calls, policies and metrics"
        DECIDE = "decide", "record decisions on uncertain calls"
        REPORTS = "reports", "read the reports' figures (docs/reports.md)"

    name = models.CharField(max_length=200, help_text="who or what uses it, e.g. 'billing-agent prod'")
    prefix = models.CharField(max_length=16, help_text="the first characters of the secret, to recognise it")
    secret_sha256 = models.CharField(max_length=64, unique=True)
    scopes = models.JSONField(default=list, help_text="any of append, read, decide, reports")
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


class AccessRecord(models.Model):
    """One showing of sensitive values unmasked: who, when, through which front end, what, and why.

    Written before the value leaves Reckon (access.services), by the console's reveals and unmasked
    exports, by every API read that answers with sensitive values unmasked, and by the commands that
    print them (``replay --json``, ``uncertain --json``). Append-only like the
    run log: the database refuses UPDATE and DELETE (migration 0002). Who is kept by id and by name
    as text rather than by foreign key, so that removing a user or a token never has to change (or
    could cascade into) a record.
    """

    class FrontEnd(models.TextChoices):
        CONSOLE = "console", "console reveal"
        EXPORT = "export", "console export"
        API = "api", "HTTP API"
        COMMAND = "command", "command line"

    class ActorKind(models.TextChoices):
        USER = "user", "person"
        TOKEN = "token", "API token"

    at = models.DateTimeField(default=timezone.now)
    actor_kind = models.CharField(max_length=8, choices=ActorKind.choices)
    actor_id = models.BigIntegerField(null=True, blank=True)
    actor_name = models.CharField(max_length=200)
    # A person signed in through the identity provider: its issuer and subject, which stay when the
    # display name changes (access.oidc). Null for tokens, local users and commands. Nullable without
    # a default so that adding them altered the append-only table in place, row triggers untouched.
    actor_issuer = models.CharField(max_length=500, null=True, blank=True)
    actor_subject = models.CharField(max_length=255, null=True, blank=True)
    front_end = models.CharField(max_length=16, choices=FrontEnd.choices)
    run_id = models.CharField(max_length=200)
    call_id = models.CharField(max_length=200, blank=True, default="")
    idempotency_key = models.CharField(max_length=200, blank=True, default="")
    seq = models.BigIntegerField(null=True, blank=True, help_text="the event a console reveal showed a field of")
    fields = models.JSONField(default=list, blank=True, help_text="dotted paths of the values shown unmasked")
    all_fields = models.BooleanField(default=False, help_text="every sensitive field of the run (an unmasked export)")
    why = models.TextField(help_text="the reason given for a reveal; the route for an API read or an export")
    tenant = models.CharField(max_length=600, blank=True, default="", help_text="the run's tenants, comma-separated")

    class Meta:
        db_table = "reckon_access_record"
        ordering = ["-at", "-id"]
        indexes = [
            models.Index(fields=["-at", "-id"], name="reckon_access_at"),
            models.Index(fields=["run_id", "-at", "-id"], name="reckon_access_run"),
            models.Index(fields=["actor_name", "-at", "-id"], name="reckon_access_actor"),
        ]

    def __str__(self) -> str:
        return f"{self.actor_name} via {self.front_end} on {self.run_id} at {self.at:%Y-%m-%d %H:%M:%S}"

    def what(self) -> str:
        """The record's "what" in words, for screens."""
        if self.all_fields:
            return "every sensitive field of the run"
        shown = ", ".join(self.fields[:6]) + (f" and {len(self.fields) - 6} more" if len(self.fields) > 6 else "")
        return f"{shown} of event {self.seq}" if self.seq is not None else shown


class RunWriter(models.Model):
    """A token whose lease began a run: the run is its agent's own.

    An agent's token reads back exactly what it wrote (access.masking), and that is not a showing of
    sensitive values to anyone new; the same token reading another run's values is, and is recorded.
    Written when a token's lease acquisition creates the run (api.runs), once per run; taking the
    lease of a run that already exists makes no token its writer.
    """

    token_id = models.BigIntegerField()
    run_id = models.CharField(max_length=200)
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "reckon_run_writer"
        constraints = [models.UniqueConstraint(fields=["token_id", "run_id"], name="reckon_run_writer_once")]


class AccessChainLink(models.Model):
    """An access record's place in its run's chain of access records (access/chain.py): its number
    within the run (1, 2, ...) and sha256(previous hash || sha256(canonical record)). A side table,
    so the append-only access record table keeps its shape; written in the record's transaction."""

    record_id = models.BigIntegerField(primary_key=True)
    run_id = models.CharField(max_length=200)
    n = models.BigIntegerField()
    hash = models.BinaryField()

    class Meta:
        db_table = "reckon_access_chain"
        constraints = [models.UniqueConstraint(fields=["run_id", "n"], name="reckon_access_chain_run_n")]


class AccessHead(models.Model):
    """The head of a run's access-record chain: how many records, and the last one's hash. Writers
    lock this row, so a run's records are numbered and chained one at a time."""

    run_id = models.CharField(max_length=200, primary_key=True)
    count = models.BigIntegerField(default=0)
    head = models.BinaryField(null=True)

    class Meta:
        db_table = "reckon_access_head"


class PersonIdentity(models.Model):
    """Who a person signed in through the identity provider is, for good: the provider's issuer and
    subject (OpenID Connect's stable pair; an e-mail address or a display name may change or be
    reused), the Django user created on their first sign-in, and the tenant limit their groups gave
    them at their last sign-in (None: every tenant). Written by access.oidc only."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="reckon_identity")
    issuer = models.CharField(max_length=500)
    subject = models.CharField(max_length=255)
    tenants = models.JSONField(null=True, blank=True, help_text="tenants this person may see; empty (null) means all")
    first_at = models.DateTimeField(default=timezone.now)
    last_at = models.DateTimeField(default=timezone.now, help_text="the last sign-in or renewal at the provider")

    class Meta:
        db_table = "reckon_person_identity"
        constraints = [models.UniqueConstraint(fields=["issuer", "subject"], name="reckon_person_identity_once")]

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer}"
