"""The reader's time zone preference, kept in their session (console.middleware applies it)."""

from __future__ import annotations

ZONE_KEY = "reckon_time_zone"


def reader_zone_load(request, user) -> str:
    """Read the person's time zone preference ("" for none) into their session."""
    from console.models import UserPreference

    name = UserPreference.objects.filter(user_id=user.pk).values_list("time_zone", flat=True).first() or ""
    request.session[ZONE_KEY] = name
    return name


def reader_zone_on_login(sender, request, user, **kwargs):
    """Signing in reads the preference into the new session (connected in console.apps), so pages
    make no extra query for it."""
    if request is not None and hasattr(request, "session"):
        reader_zone_load(request, user)


def reader_zone_name(request) -> str:
    """The signed-in person's time zone preference ("" for none), from the session; a session
    older than the preference feature reads it once."""
    name = request.session.get(ZONE_KEY)
    return reader_zone_load(request, request.user) if name is None else name
