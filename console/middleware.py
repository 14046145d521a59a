"""The console's own errors rendered in its layout whatever DEBUG is."""

from __future__ import annotations

from django.http import Http404

from console.views import not_found


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
