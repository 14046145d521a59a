"""API tokens and who a request acts as.

A machine presents ``Authorization: Bearer <secret>``; the secret is ``rk_`` plus 32 random bytes,
and only its sha256 is stored. Tokens carry scopes (``append`` for agents, ``read``, ``decide``) and
optionally a list of tenants; an empty list means every tenant. A revoked token authenticates
nobody. A console user acts through the session instead, with the permissions of their role
(console.roles); their tenants are unlimited, unless the identity provider's groups limit them
(access.oidc).

``Principal`` is what the API's handlers see for either kind of caller, so each rule (scope,
tenant) is checked in one place whoever is calling.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Iterable

from django.db.models import Q
from django.utils import timezone

from access.models import ApiToken, PersonIdentity
from access.roles import perm

SCOPES = tuple(ApiToken.Scope.values)
TOKEN_PREFIX = "rk_"
# Recording every use would make every append also write the token row; a minute is precise
# enough to tell a token still in use from an abandoned one.
LAST_USED_RESOLUTION = timedelta(seconds=60)


class TokenError(ValueError):
    """A token request that cannot be honoured as given."""


@dataclass(frozen=True)
class Principal:
    """Who a request acts as: a token or a signed-in user, with what it may do and for which tenants."""

    kind: str  # "token" or "user"
    name: str
    owner: str  # a stable key for per-sender records: "token:<id>" or "user:<id>"
    scopes: frozenset[str]
    tenants: frozenset[str] | None = None  # None: every tenant
    user: object = field(default=None, compare=False)
    is_admin: bool = False
    issuer: str = ""  # a person signed in through the identity provider: its issuer and subject
    subject: str = ""

    def may_see(self, tenants: Iterable[str]) -> bool:
        return self.tenants is None or set(tenants) <= self.tenants

    def may_see_run(self, run_id: str) -> bool:
        """The one rule for a run and everything in it (its events, state, uncertain calls): every
        tenant of the run is one of the caller's (access.tenancy says why). A list of runs or calls
        applies the same rule with ``access.tenancy.runs_visible``."""
        if self.tenants is None:
            return True
        from runs.tenants import run_tenants

        return self.may_see(run_tenants(run_id=run_id))


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def token_create(*, name: str, scopes: Iterable[str], tenants: Iterable[str] = (), created_by=None) -> tuple[ApiToken, str]:
    """Create a token and return it with its secret, which is not stored and cannot be shown again."""
    name = (name or "").strip()
    if not name or len(name) > 200:
        raise TokenError("a token needs a name of 1 to 200 characters")
    scopes = sorted(set(scopes))
    unknown = [s for s in scopes if s not in SCOPES]
    if unknown or not scopes:
        raise TokenError(f"scopes must be one or more of {', '.join(SCOPES)}; got {', '.join(scopes) or 'none'}")
    tenants = sorted({t.strip() for t in tenants if t and t.strip()})
    if any(len(t) > 200 for t in tenants):
        raise TokenError("a tenant name has at most 200 characters")
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        name=name, prefix=secret[:10], secret_sha256=_hash(secret), scopes=scopes, tenants=tenants, created_by=created_by
    )
    return token, secret


def token_revoke(*, token: ApiToken) -> None:
    """Revoke a token from now on; a revoked token stays listed for audit."""
    if token.revoked_at is None:
        ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
        token.refresh_from_db(fields=["revoked_at"])


def token_authenticate(*, secret: str) -> ApiToken | None:
    """The live token with this secret, its last use recorded; None for an unknown or revoked one."""
    if not secret or not secret.startswith(TOKEN_PREFIX) or len(secret) > 200:
        return None
    token = ApiToken.objects.filter(secret_sha256=_hash(secret), revoked_at__isnull=True).first()
    if token is None:
        return None
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at >= LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).filter(Q(last_used_at__isnull=True) | Q(last_used_at__lt=now - LAST_USED_RESOLUTION)).update(
            last_used_at=now
        )
        token.last_used_at = now
    return token


def principal_for_token(token: ApiToken) -> Principal:
    return Principal(
        kind="token",
        name=token.name,
        owner=f"token:{token.pk}",
        scopes=frozenset(token.scopes),
        tenants=frozenset(token.tenants) if token.tenants else None,
    )


def owner_name(owner: str) -> str:
    """Who a stable caller key (``Principal.owner``) names, for an answer to someone else: a token's
    name or a person's user name, never a secret; "" is Reckon itself."""
    kind, _, ident = (owner or "").partition(":")
    if kind == "token" and ident.isdigit():
        name = ApiToken.objects.filter(pk=int(ident)).values_list("name", flat=True).first()
        return f"token {name!r}" if name is not None else "a token that no longer exists"
    if kind == "user" and ident.isdigit():
        from django.contrib.auth import get_user_model

        user = get_user_model().objects.filter(pk=int(ident)).first()
        return f"user {user.get_username()!r}" if user is not None else "a user who no longer exists"
    return "Reckon"


def principal_for_user(user) -> Principal:
    """A console user's API scopes follow their console permissions (console.roles)."""
    admin = bool(user.is_superuser or user.is_staff)
    scopes = set()
    if admin or user.has_perm(perm("view_console")):
        scopes.add("read")
    if user.has_perm(perm("decide_call")):
        scopes.add("decide")
    if admin or user.has_perm(perm("view_reports")):
        scopes.add("reports")
    if admin:
        scopes.add("append")  # people do not write agent events; administrators may, to repair
    # A person signed in through the identity provider sees the tenants their groups gave them at
    # their last sign-in (access.oidc); a local user sees every tenant.
    identity = PersonIdentity.objects.filter(user_id=user.pk).values("tenants", "issuer", "subject").first() or {}
    tenants = frozenset(identity["tenants"]) if identity.get("tenants") is not None else None
    return Principal(
        kind="user", name=user.get_username(), owner=f"user:{user.pk}", scopes=frozenset(scopes), tenants=tenants, user=user, is_admin=admin,
        issuer=identity.get("issuer", ""), subject=identity.get("subject", ""),
    )
