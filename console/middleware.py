"""The console's own errors rendered in its layout whatever DEBUG is."""

from __future__ import annotations

from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.http import Http404

from evidence.report import bidi_visible

from console.templatetags.console_tags import reader_zone
from console.views import not_found
from console.zones import reader_zone_name

class ReaderTimeZoneMiddleware:
    """Times are written in UTC everywhere; a person who chose a time zone sees each one in it on
    hover (console_tags.utc reads ``reader_zone``). The preference is kept in the session, so it
    costs one query per session, not per page."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        zone = None
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            try:
                name = reader_zone_name(request)
                zone = ZoneInfo(name) if name else None
            except (ZoneInfoNotFoundError, ValueError):
                zone = None
        token = reader_zone.set(zone)
        try:
            return self.get_response(request)
        finally:
            reader_zone.reset(token)


class ConsoleErrorsMiddleware:
    """A console view that raises Http404 (a run, call or export format that does not exist) gets
    the console's 404 page with the reason. Without this, DEBUG=true shows Django's debug page for
    an operator's mistyped run id. Other URLs keep Django's handlers (reckon/urls.py)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exc):
        match = getattr(request, "resolver_match", None)
        if isinstance(exc, Http404) and match is not None and match.namespace == "console":
            return not_found(request, exc)
        return None


class BidiVisibleMiddleware:
    """Every HTML page and fragment the site answers shows Unicode's bidirectional controls as their
    code points (evidence.report.bidi_visible), wherever the text came from: a reason, a note, an
    agent's argument, a run id. One place, so no template can forget it. JSON and exports are data
    and keep the characters as they are."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if response.streaming or not response.get("Content-Type", "").startswith("text/html"):
            return response
        text = response.content.decode(response.charset or "utf-8")
        shown = bidi_visible(text)
        if shown is not text:
            response.content = shown.encode(response.charset or "utf-8")
        return response
