"""Who may do what in the console: the groups, their permissions, and the checks views use.

Permissions live on a content type of their own (``access.access``) rather than on a model, so
the console needs no table of its own for them. ``roles_ensure`` creates the groups and permissions
and is idempotent: ``manage.py demo`` calls it, and so does every test that signs someone in.
Administrators are Django staff/superusers; a superuser holds every permission implicitly.
"""

from __future__ import annotations

from functools import wraps

from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import PermissionDenied
from django.db import transaction

from access.models import PersonIdentity

APP = "access"

PERMISSIONS: dict[str, str] = {
    "view_console": "Can read queues, calls, runs, dashboards and the decision log",
    "decide_call": "Can record a decision on an uncertain call",
    "claim_call": "Can claim or assign uncertain calls",
    "add_note": "Can add a note to an uncertain call",
    "export_run": "Can export a run's events",
    "view_sensitive": "Can see sensitive argument fields unmasked (each reveal is recorded)",
    "manage_policies": "Can change tool policies",
    "view_reports": "Can read the reports (trends, resolution times, deadlines) and export them",
}

ONCALL, COMPLIANCE, MANAGER = "oncall", "compliance", "manager"

GROUPS: dict[str, tuple[str, ...]] = {
    # On-call staff work the queue: they read, claim, decide and annotate. They do not export.
    ONCALL: ("view_console", "decide_call", "claim_call", "add_note"),
    # Compliance reads everything, sensitive fields included, and exports; it never decides.
    COMPLIANCE: ("view_console", "export_run", "view_sensitive", "add_note"),
    # Managers watch dashboards, read and read the reports (and download their tables); they neither
    # decide nor export a run's events.
    MANAGER: ("view_console", "view_reports"),
}


def perm(codename: str) -> str:
    """The full permission name a ``has_perm`` check needs."""
    if codename not in PERMISSIONS:
        raise ValueError(f"no permission {codename!r}: one of {', '.join(PERMISSIONS)}")
    return f"{APP}.{codename}"


@transaction.atomic
def roles_ensure() -> None:
    """Create the console's permissions and the three groups, and set each group's permissions."""
    ct, _ = ContentType.objects.get_or_create(app_label=APP, model="access")
    perms = {}
    for codename, name in PERMISSIONS.items():
        p, _ = Permission.objects.get_or_create(content_type=ct, codename=codename, defaults={"name": name})
        perms[codename] = p
    for group_name, codenames in GROUPS.items():
        group, _ = Group.objects.get_or_create(name=group_name)
        group.permissions.set([perms[c] for c in codenames])


def role_names(user) -> list[str]:
    """The roles a user holds, for the header: administrator first, then the groups."""
    if not user.is_authenticated:
        return []
    names = ["administrator"] if (user.is_superuser or user.is_staff) else []
    return names + sorted(g.name for g in user.groups.all() if g.name in GROUPS)


def tenant_limited(user) -> bool:
    """A person whose identity provider groups limit them to some tenants (access.oidc)."""
    return bool(user.is_authenticated) and PersonIdentity.objects.filter(user_id=user.pk, tenants__isnull=False).exists()


def requires(*codenames: str):
    """View decorator: sign-in first (anonymous visitors go to the sign-in page), then every named
    permission (a signed-in user without one gets 403, never a page with data on it)."""

    def deco(view):
        @wraps(view)
        def wrapped(request, *args, **kwargs):
            if tenant_limited(request.user):
                # Fail closed: the console's lists and screens do not narrow by tenant yet (the API
                # does, access.tenancy), so a person limited to tenants must not see them all here.
                raise PermissionDenied("your account is limited to some tenants, and the console's screens cannot narrow to them yet: use the API, which does")
            for c in codenames:
                if not request.user.has_perm(perm(c)):
                    raise PermissionDenied(f"this needs the {c.replace('_', ' ')} permission")
            return view(request, *args, **kwargs)

        return login_required(wrapped)

    return deco


def sees_people_figures(user) -> bool:
    """Whether the reports show ``user`` the per-person table (who decided how many, how long calls
    waited while each person held them): for staffing, not blame, so managers and administrators
    only, and only with the reports permission."""
    if not (user.is_authenticated and user.has_perm(perm("view_reports"))):
        return False
    return bool(user.is_superuser or user.is_staff or user.groups.filter(name=MANAGER).exists())
