"""Project-wide middleware that no single app owns: text no part of Reckon can store is refused at
the door, and responses are marked not to be stored by caches.

A NUL character is refused by PostgreSQL in every text column and query, and a lone UTF-16
surrogate is not a character at all; passed down, either ends deep in a view as a database error
(a 500). This middleware answers 400 instead, naming the parameter, for the path, the query string
and form fields; JSON bodies are checked by the API's parser (api/instance.py), field by field.
"""

from __future__ import annotations

import re

from django.http import HttpResponseBadRequest, JsonResponse

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def _problem(text: str) -> str | None:
    found = _UNSTORABLE.search(text)
    if not found:
        return None
    return "a NUL character" if found.group() == "\x00" else "a lone UTF-16 surrogate"


def _first_problem(request) -> str | None:
    problem = _problem(request.path_info)
    if problem:
        return f"the path contains {problem}"
    sources = [("query parameter", request.GET)]
    if request.method == "POST" and request.content_type in ("application/x-www-form-urlencoded", "multipart/form-data"):
        sources.append(("form field", request.POST))
    for what, data in sources:
        for name, values in data.lists():
            problem = _problem(name)
            if problem:
                return f"a {what} name contains {problem}"
            for value in values:
                problem = _problem(value)
                if problem:
                    return f"{what} {name!r} contains {problem}"
    return None


class UnstorableTextMiddleware:
    """400 for a request whose path, query string or form fields hold NUL or a lone surrogate."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        problem = _first_problem(request)
        if problem is None:
            return self.get_response(request)
        if request.path_info.startswith("/api/"):
            return JsonResponse({"detail": f"invalid request: {problem}", "code": "invalid"}, status=400)
        return HttpResponseBadRequest(f"Bad request: {problem}", content_type="text/plain; charset=utf-8")


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
