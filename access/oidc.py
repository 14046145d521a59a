"""Sign-in through the organisation's OpenID provider, and who may still sign in with a password.

Built on mozilla-django-oidc (its views make the authorization request with ``state``, ``nonce``
and a PKCE challenge, keep them in the session and take each ``state`` back once; its backend
exchanges the code). What it leaves to its user is done here, once:

- the provider is found from the issuer's discovery document (whose ``issuer`` must be the one
  configured), and its keys from the document's JWKS, both cached; a token signed with a key id
  the cached set lacks fetches the set again once, so a key rotation needs no restart;
- the ID token's signature, issuer, audience (and ``azp``), expiry and nonce are all checked
  (the library checks the signature and nonce only);
- a person is found by issuer and subject (``PersonIdentity``), never by e-mail; the group map
  (settings.RECKON_OIDC_GROUP_MAP) sets their roles and tenant limit at every sign-in and every
  renewal; a person whose groups map to no role is refused and nothing is created;
- the session's bound: ``session_renew`` asks the provider again (refresh token) and applies the
  answer, so a person disabled or removed from their groups at the provider cannot continue.

Every refusal raises ``SignInRefused`` with a sentence for the person; console/oidc.py shows it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import jwt
import requests
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import Group
from django.core.cache import cache
from django.db import IntegrityError, transaction
from django.utils import timezone
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from access.models import PersonIdentity
from access.roles import GROUPS

ADMIN_ROLE = "admin"  # reckon.oidc_env.ADMIN: the map's word for a Django staff superuser
TENANT_PREFIX = "tenant:"
SESSION_AT = "reckon_oidc_at"  # when the provider last vouched for this session (epoch seconds)
SESSION_REFRESH = "reckon_oidc_refresh"
SESSION_ID_TOKEN = "reckon_oidc_id_token"  # the id_token_hint of RP-initiated logout
SESSION_SUBJECT = "reckon_oidc_sub"


class SignInRefused(Exception):
    """A sign-in (or a renewal) the provider's answer does not allow; ``str`` is said to the person."""


def oidc_enabled() -> bool:
    return bool(settings.RECKON_OIDC_ISSUER)


@dataclass(frozen=True)
class Provider:
    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str
    userinfo_endpoint: str = ""
    end_session_endpoint: str = ""


def _get_json(url: str, what: str) -> dict:
    try:
        response = requests.get(url, timeout=settings.RECKON_OIDC_TIMEOUT_S, headers={"Accept": "application/json"})
        response.raise_for_status()
        body = response.json()
    except (requests.RequestException, ValueError) as exc:
        raise SignInRefused(f"the identity provider's {what} could not be read ({type(exc).__name__}); nothing was recorded, try again later") from None
    if not isinstance(body, dict):
        raise SignInRefused(f"the identity provider's {what} is not a JSON object")
    return body


def _cache_key(what: str) -> str:
    return f"reckon-oidc:{what}:{settings.RECKON_OIDC_ISSUER}"


def provider_get() -> Provider:
    """The provider as its discovery document describes it (cached RECKON_OIDC_CACHE_S seconds)."""
    doc = cache.get(_cache_key("discovery"))
    if doc is None:
        doc = _get_json(settings.RECKON_OIDC_ISSUER + "/.well-known/openid-configuration", "discovery document")
        if doc.get("issuer") != settings.RECKON_OIDC_ISSUER:
            # OpenID Connect Discovery 4.3: the document must name the issuer it was fetched for.
            raise SignInRefused(f"the discovery document names issuer {doc.get('issuer')!r}, not the configured {settings.RECKON_OIDC_ISSUER!r}")
        missing = [k for k in ("authorization_endpoint", "token_endpoint", "jwks_uri") if not isinstance(doc.get(k), str)]
        if missing:
            raise SignInRefused(f"the identity provider's discovery document lacks {', '.join(missing)}")
        named = [doc.get(k) for k in ("authorization_endpoint", "token_endpoint", "jwks_uri", "userinfo_endpoint", "end_session_endpoint") if doc.get(k)]
        if settings.RECKON_OIDC_ISSUER.startswith("https:") and not all(isinstance(u, str) and u.startswith("https://") for u in named):
            raise SignInRefused("the identity provider's discovery document names an endpoint that is not https")
        cache.set(_cache_key("discovery"), doc, settings.RECKON_OIDC_CACHE_S)
    return Provider(
        issuer=doc["issuer"],
        authorization_endpoint=doc["authorization_endpoint"],
        token_endpoint=doc["token_endpoint"],
        jwks_uri=doc["jwks_uri"],
        userinfo_endpoint=doc.get("userinfo_endpoint") or "",
        end_session_endpoint=doc.get("end_session_endpoint") or "",
    )


def _signing_key(token: str, alg: str) -> jwt.PyJWK:
    """The provider's key the token names, from the cached key set; an unknown ``kid`` fetches the
    set again once (the provider rotated its keys), and still unknown is a refusal."""
    kid = jwt.get_unverified_header(token).get("kid")
    for fresh in (False, True):
        keys = None if fresh else cache.get(_cache_key("jwks"))
        if keys is None:
            keys = _get_json(provider_get().jwks_uri, "key set").get("keys") or []
            cache.set(_cache_key("jwks"), keys, settings.RECKON_OIDC_CACHE_S)
        for jwk in keys:
            if isinstance(jwk, dict) and jwk.get("use", "sig") == "sig" and (kid is None or jwk.get("kid") == kid) and jwk.get("alg", alg) == alg:
                try:
                    return jwt.PyJWK(jwk, algorithm=alg)
                except jwt.PyJWTError:
                    continue
    raise SignInRefused(f"the ID token is signed with a key the identity provider does not publish (kid {kid!r}): a forged or foreign token")


def id_token_verify(token: str, *, nonce: str | None) -> dict:
    """The ID token's claims once its signature, issuer, audience, expiry and nonce all check."""
    if not isinstance(token, str) or not token:
        raise SignInRefused("the identity provider's answer holds no ID token")
    try:
        alg = jwt.get_unverified_header(token).get("alg")
    except jwt.PyJWTError:
        raise SignInRefused("the ID token is not a signed JWT") from None
    if alg not in settings.RECKON_OIDC_SIGN_ALGS:
        raise SignInRefused(f"the ID token is signed with {alg!r}; Reckon accepts {', '.join(settings.RECKON_OIDC_SIGN_ALGS)} (RECKON_OIDC_SIGN_ALGS)")
    key = _signing_key(token, alg)
    client_id = settings.RECKON_OIDC_CLIENT_ID
    try:
        claims = jwt.decode(
            token, key, algorithms=[alg], audience=client_id, issuer=settings.RECKON_OIDC_ISSUER,
            leeway=settings.RECKON_OIDC_LEEWAY_S, options={"require": ["iss", "sub", "aud", "exp", "iat"]},
        )
    except jwt.ExpiredSignatureError:
        raise SignInRefused("the ID token has expired") from None
    except jwt.InvalidAudienceError:
        raise SignInRefused(f"the ID token was issued to another application, not to client {client_id!r}") from None
    except jwt.InvalidIssuerError:
        raise SignInRefused("the ID token was issued by another provider than RECKON_OIDC_ISSUER") from None
    except jwt.InvalidSignatureError:
        raise SignInRefused("the ID token's signature does not verify with the identity provider's keys: a forged token") from None
    except jwt.PyJWTError as exc:
        raise SignInRefused(f"the ID token is not valid: {exc}") from None
    audiences = claims["aud"] if isinstance(claims["aud"], list) else [claims["aud"]]
    if len(audiences) > 1 and claims.get("azp") != client_id:
        raise SignInRefused("the ID token names several audiences but was not issued to this client (azp)")
    if nonce is not None and claims.get("nonce") != nonce:
        raise SignInRefused("the ID token answers another sign-in (its nonce does not match): a replayed or foreign token")
    return claims


def _as_list(value) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, str)]
    return []


@dataclass(frozen=True)
class Grant:
    """What a person's claims give them in Reckon."""

    roles: frozenset[str]
    tenants: tuple[str, ...] | None  # None: every tenant
    groups: tuple[str, ...]  # as the provider sent them, for the refusal's words


def grant_from_claims(claims: dict) -> Grant:
    """The roles and tenant limit the group map gives these claims (no role: a refusal)."""
    groups = _as_list(claims.get(settings.RECKON_OIDC_GROUPS_CLAIM))
    if not groups and "_claim_names" in claims and settings.RECKON_OIDC_GROUPS_CLAIM in claims["_claim_names"]:
        raise SignInRefused("the identity provider sent your groups by reference (too many groups): limit the groups it sends for Reckon's application")
    targets = {t for g in groups for t in settings.RECKON_OIDC_GROUP_MAP.get(g, ())}
    roles = frozenset(t for t in targets if not t.startswith(TENANT_PREFIX))
    if not roles:
        seen = ", ".join(sorted(groups)[:10]) or "none"
        raise SignInRefused(f"your account at the identity provider is in no group that Reckon maps to a role (groups seen: {seen}); ask an administrator to add you to one")
    tenants = {t[len(TENANT_PREFIX) :] for t in targets if t.startswith(TENANT_PREFIX)}
    if settings.RECKON_OIDC_TENANTS_CLAIM:
        tenants |= {t for t in _as_list(claims.get(settings.RECKON_OIDC_TENANTS_CLAIM)) if 0 < len(t) <= 200}
    return Grant(roles=roles, tenants=tuple(sorted(tenants)) or None, groups=tuple(groups))


def _username(claims: dict) -> str:
    """A new person's user name: their preferred user name, else e-mail, else subject, made unique."""
    User = get_user_model()
    base = next((str(claims[k]).strip()[:140] for k in ("preferred_username", "email", "sub") if str(claims.get(k) or "").strip()), "person")
    name, n = base, 1
    while User.objects.filter(username=name).exists():
        n += 1
        name = f"{base}-{n}"
    return name


def person_sign_in(*, claims: dict):
    """The user these verified claims name, created on first sign-in, with the roles, tenant limit,
    name and e-mail the claims give now. A refusal creates nothing; a known person whose groups no
    longer map to any role loses the roles they had, so the user list says what the provider says."""
    issuer, subject = settings.RECKON_OIDC_ISSUER, str(claims["sub"])
    try:
        grant = grant_from_claims(claims)
    except SignInRefused:
        with transaction.atomic():
            for identity in PersonIdentity.objects.select_for_update().select_related("user").filter(issuer=issuer, subject=subject):
                identity.user.groups.clear()
                type(identity.user).objects.filter(pk=identity.user_id).update(is_staff=False, is_superuser=False)
        raise
    try:
        return _person_apply(issuer=issuer, subject=subject, claims=claims, grant=grant)
    except IntegrityError:
        # The same person's first sign-in in two tabs at once: one created them, the other's
        # transaction rolled back whole (its user included); applied again, it finds them.
        return _person_apply(issuer=issuer, subject=subject, claims=claims, grant=grant)


@transaction.atomic
def _person_apply(*, issuer: str, subject: str, claims: dict, grant: Grant):
    identity = PersonIdentity.objects.select_for_update().select_related("user").filter(issuer=issuer, subject=subject).first()
    if identity is None:
        user = get_user_model().objects.create_user(_username(claims))  # no usable password: sign-in goes through the provider
        identity = PersonIdentity(user=user, issuer=issuer, subject=subject)
    user = identity.user
    if not user.is_active:
        raise SignInRefused("this account is switched off in Reckon; ask an administrator")
    user.first_name = str(claims.get("given_name") or claims.get("name") or "")[:150]
    user.last_name = str(claims.get("family_name") or "")[:150]
    user.email = str(claims.get("email") or "")[:254]
    user.is_staff = user.is_superuser = ADMIN_ROLE in grant.roles
    user.save()
    user.groups.set(Group.objects.filter(name__in=[r for r in grant.roles if r in GROUPS]))
    identity.tenants = list(grant.tenants) if grant.tenants is not None else None
    identity.last_at = timezone.now()
    identity.save()
    return user


def _token_request(data: dict) -> dict:
    data = {**data, "client_id": settings.RECKON_OIDC_CLIENT_ID}
    if settings.RECKON_OIDC_CLIENT_SECRET:
        data["client_secret"] = settings.RECKON_OIDC_CLIENT_SECRET
    try:
        response = requests.post(provider_get().token_endpoint, data=data, timeout=settings.RECKON_OIDC_TIMEOUT_S, headers={"Accept": "application/json"})
        body = response.json()
    except (requests.RequestException, ValueError) as exc:
        raise SignInRefused(f"the identity provider's token endpoint did not answer ({type(exc).__name__})") from None
    if response.status_code != 200 or not isinstance(body, dict):
        error = body.get("error", "") if isinstance(body, dict) else ""
        described = body.get("error_description", "") if isinstance(body, dict) else ""
        raise SignInRefused(f"the identity provider refused: {error or response.status_code}{' (' + str(described)[:200] + ')' if described else ''}")
    return body


def _claims_with_userinfo(id_claims: dict, access_token: str | None) -> dict:
    """The ID token's claims, with the userinfo endpoint's added where the provider has one (some
    send groups only there); userinfo about another subject is refused (OpenID Connect Core 5.3.2)."""
    provider = provider_get()
    if not access_token or not provider.userinfo_endpoint:
        return id_claims
    try:
        response = requests.get(provider.userinfo_endpoint, headers={"Authorization": f"Bearer {access_token}"}, timeout=settings.RECKON_OIDC_TIMEOUT_S)
        response.raise_for_status()
        info = response.json()
    except (requests.RequestException, ValueError) as exc:
        raise SignInRefused(f"the identity provider's userinfo endpoint did not answer ({type(exc).__name__})") from None
    if not isinstance(info, dict) or info.get("sub") != id_claims["sub"]:
        raise SignInRefused("the identity provider's userinfo answer is about another person")
    return {**info, **{k: v for k, v in id_claims.items() if k in ("iss", "sub", "aud", "exp", "iat", "nonce", "azp")}}


def _session_keep(session, tokens: dict, claims: dict) -> None:
    session[SESSION_AT] = time.time()
    session[SESSION_SUBJECT] = str(claims["sub"])
    if tokens.get("refresh_token"):
        session[SESSION_REFRESH] = tokens["refresh_token"]
    if tokens.get("id_token"):
        session[SESSION_ID_TOKEN] = tokens["id_token"]


def session_renew(*, session):
    """Ask the provider again for the person this session belongs to (its refresh token) and apply
    its answer: the user with today's roles, or SignInRefused (disabled, removed from every mapped
    group, or a session with nothing to renew with: the person must sign in again)."""
    refresh = session.get(SESSION_REFRESH)
    if not refresh:
        raise SignInRefused("your sign-in has reached its time limit; sign in again to continue")
    tokens = _token_request({"grant_type": "refresh_token", "refresh_token": refresh})
    claims = id_token_verify(tokens["id_token"], nonce=None) if tokens.get("id_token") else {"sub": session.get(SESSION_SUBJECT)}
    if str(claims.get("sub")) != session.get(SESSION_SUBJECT):
        raise SignInRefused("the identity provider renewed the sign-in of another person")
    claims = _claims_with_userinfo(claims, tokens.get("access_token"))
    user = person_sign_in(claims=claims)
    _session_keep(session, tokens, claims)
    return user


class OidcBackend(OIDCAuthenticationBackend):
    """mozilla-django-oidc's backend with the provider, checks and person rules above. Settings are
    read when used (never in ``__init__``: Django makes a backend for every request's session)."""

    def __init__(self, *args, **kwargs):
        self.UserModel = get_user_model()

    @staticmethod
    def get_settings(attr, *args):
        return oidc_setting(attr, *args)

    def authenticate(self, request, nonce=None, code_verifier=None, **kwargs):
        if request is None or not oidc_enabled() or "code" not in request.GET or kwargs:
            return None
        tokens = _token_request({
            "grant_type": "authorization_code",
            "code": request.GET["code"],
            "redirect_uri": request.build_absolute_uri(_callback_path()),
            **({"code_verifier": code_verifier} if code_verifier else {}),
        })
        claims = id_token_verify(tokens.get("id_token"), nonce=nonce)
        claims = _claims_with_userinfo(claims, tokens.get("access_token"))
        user = person_sign_in(claims=claims)
        _session_keep(request.session, tokens, claims)
        return user

    def get_user(self, user_id):
        user = self.UserModel.objects.filter(pk=user_id).first()
        return user if user is not None and user.is_active else None


def _callback_path() -> str:
    from django.urls import reverse

    return reverse(oidc_setting("OIDC_AUTHENTICATION_CALLBACK_URL"))


def oidc_setting(attr: str, *default):
    """mozilla-django-oidc's settings, answered from Reckon's (so a test's override of a RECKON_OIDC_*
    setting is seen by the library too)."""
    answers = {
        "OIDC_RP_CLIENT_ID": lambda: settings.RECKON_OIDC_CLIENT_ID,
        "OIDC_RP_SCOPES": lambda: settings.RECKON_OIDC_SCOPES,
        "OIDC_OP_AUTHORIZATION_ENDPOINT": lambda: provider_get().authorization_endpoint,
        "OIDC_USE_PKCE": lambda: True,
        "OIDC_USE_NONCE": lambda: True,
        "OIDC_PKCE_CODE_CHALLENGE_METHOD": lambda: "S256",
        "OIDC_AUTHENTICATION_CALLBACK_URL": lambda: "console:oidc_callback",
        "OIDC_REDIRECT_FIELD_NAME": lambda: "next",
        "LOGIN_REDIRECT_URL": lambda: settings.LOGIN_REDIRECT_URL,
    }
    if attr in answers:
        return answers[attr]()
    if default:
        return default[0]
    raise KeyError(f"no OIDC setting {attr}")


class PasswordBackend(ModelBackend):
    """Django's password sign-in, which RECKON_PASSWORD_SIGN_IN=false keeps for the one break-glass
    administrator (RECKON_BREAK_GLASS_USER) alone. A refusal here is a failed attempt to django-axes
    like a wrong password, so the lockout still guards this path. A session signed in by password
    ends too when the setting turns off (``get_user``)."""

    @staticmethod
    def allowed(username: str | None) -> bool:
        return settings.RECKON_PASSWORD_SIGN_IN or (bool(settings.RECKON_BREAK_GLASS_USER) and username == settings.RECKON_BREAK_GLASS_USER)

    def authenticate(self, request, username=None, password=None, **kwargs):
        if not self.allowed(username):
            return None
        return super().authenticate(request, username=username, password=password, **kwargs)

    def get_user(self, user_id):
        user = super().get_user(user_id)
        return user if user is not None and self.allowed(user.get_username()) else None


def identity_of(user) -> PersonIdentity | None:
    """The provider identity of a user signed in through it, or None (a local user)."""
    if user is None or not getattr(user, "pk", None):
        return None
    return PersonIdentity.objects.filter(user_id=user.pk).first()

