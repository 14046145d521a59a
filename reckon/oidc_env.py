"""The single sign-on settings read from the environment: the group map's parsing and the checks that
name a bad value before anyone tries to sign in (docs/configuration.md, "Single sign-on").

Here rather than in access/oidc.py: settings are read before Django's apps are loaded, and the
access app's modules import the auth models. access/oidc.py checks at import that ``ROLES`` names
exactly the console's roles (access.roles.GROUPS) and the administrator.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

ADMIN = "admin"
ROLES = ("oncall", "compliance", "manager", ADMIN)
TENANT = "tenant:"
LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def oidc_group_map(name: str, value: str) -> dict[str, tuple[str, ...]]:
    """``"group=target; group=target; ..."``: each IdP group (as the group claim spells it) to what
    it grants, a role (oncall, compliance, manager, admin) or a tenant limit (``tenant:acme``). A
    group may be named in several entries. Entries are split on ``;`` or a new line and each on its
    last ``=``, so a group may itself hold ``=`` and ``,`` (an LDAP name: ``cn=ops,ou=groups=oncall``)."""
    out: dict[str, list[str]] = {}
    for raw in value.replace("\n", ";").split(";"):
        entry = raw.strip()
        if not entry:
            continue
        group, eq, target = entry.rpartition("=")
        group, target = group.strip(), target.strip()
        if not eq or not group:
            raise ImproperlyConfigured(f"{name}: {entry!r} is not group=role or group=tenant:NAME")
        if target.startswith(TENANT):
            tenant = target[len(TENANT) :].strip()
            if not tenant or len(tenant) > 200:
                raise ImproperlyConfigured(f"{name}: {entry!r} names no tenant (or one over 200 characters) after 'tenant:'")
            target = TENANT + tenant
        elif target not in ROLES:
            raise ImproperlyConfigured(f"{name}: {entry!r} grants {target!r}, which is not one of {', '.join(ROLES)} or tenant:NAME")
        out.setdefault(group, [])
        if target not in out[group]:
            out[group].append(target)
    return {group: tuple(targets) for group, targets in out.items()}


def oidc_settings_check(*, issuer: str, client_id: str, scopes: str, groups_claim: str, group_map: dict, password_sign_in: bool, break_glass: str) -> None:
    """Refuse a sign-in configuration that cannot work, naming the variable."""
    if not password_sign_in and not issuer:
        raise ImproperlyConfigured("RECKON_PASSWORD_SIGN_IN=false needs RECKON_OIDC_ISSUER: otherwise nobody but the break-glass administrator could sign in")
    if not password_sign_in and not break_glass:
        raise ImproperlyConfigured("RECKON_PASSWORD_SIGN_IN=false needs RECKON_BREAK_GLASS_USER: the one administrator who may still sign in with a password when the identity provider is down")
    if not issuer:
        return
    parts = urlsplit(issuer)
    if parts.scheme not in ("https", "http") or not parts.hostname or parts.query or parts.fragment:
        raise ImproperlyConfigured(f"RECKON_OIDC_ISSUER={issuer!r} is not an issuer URL: write it as the provider publishes it, e.g. https://sso.example.com/realms/ops")
    if parts.scheme == "http" and parts.hostname not in LOOPBACK:
        raise ImproperlyConfigured(f"RECKON_OIDC_ISSUER={issuer!r} must use https: its keys and tokens would otherwise travel in the clear (plain http only on 127.0.0.1 or localhost, for testing)")
    if not client_id:
        raise ImproperlyConfigured("RECKON_OIDC_ISSUER is set but RECKON_OIDC_CLIENT_ID is empty: give the client id registered at the provider")
    if "openid" not in scopes.split():
        raise ImproperlyConfigured(f"RECKON_OIDC_SCOPES={scopes!r} must include openid")
    if not groups_claim:
        raise ImproperlyConfigured("RECKON_OIDC_GROUPS_CLAIM is empty: name the claim that lists a person's groups (groups, roles, ...)")
    if not any(t in ROLES for targets in group_map.values() for t in targets):
        raise ImproperlyConfigured("RECKON_OIDC_ISSUER is set but RECKON_OIDC_GROUP_MAP grants no role: nobody could sign in (e.g. RECKON_OIDC_GROUP_MAP='reckon-oncall=oncall; reckon-admins=admin')")
