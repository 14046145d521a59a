"""Project-wide response headers that no single app owns."""

from __future__ import annotations


class NoStoreMiddleware:
    """``Cache-Control: no-store`` on every response Reckon builds, unless a view chose otherwise.

    Console pages, exports and API answers carry run data (arguments, evidence, who decided what):
    no shared proxy or browser cache should keep a copy. Static files never reach this middleware:
    WhiteNoise, placed before it, answers them with their own long-lived caching headers.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if "Cache-Control" not in response:
            response["Cache-Control"] = "no-store"
        return response
