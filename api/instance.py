"""The HTTP API's one NinjaAPI instance, with every error mapped once (api.errors).

Routers are added to it in api/urls.py, so a module that needs the instance (the idempotency
records render their stored responses with it) can import it without importing the routers.
"""

from __future__ import annotations

import re

import orjson
from ninja import NinjaAPI
from ninja.parser import Parser

from api.errors import errors_register
from runs.json_strict import json_loads_strict

# Every JSON string, with a colon when it is a key. Matched from the left, each match starts at an
# opening quote (outside strings JSON has no quotes) and consumes the string whole, escapes included,
# so the colons counted are exactly the document's keys.
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"\s*(:?)')
# An integer outside the signed 64-bit range has at least 19 digits.
_LONG_DIGITS = re.compile(rb"\d{19}")


def _keys_in(value) -> int:
    count, stack = 0, [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            count += len(v)
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return count


def _exact(body: bytes, value) -> bool:
    """True when orjson's answer is surely what was sent: no NUL escape, no number long enough to
    leave 64 bits, and as many keys decoded as the text holds (a duplicate key would have merged)."""
    if b"\\u0000" in body or _LONG_DIGITS.search(body):
        return False
    return _keys_in(value) == sum(1 for colon in _STRING.findall(body) if colon)


class _OrjsonParser(Parser):
    """Request bodies decoded with orjson: a 100-event append spends less time in JSON than in
    validation this way. orjson cannot say everything Reckon needs to know (it keeps the last of two
    equal keys, turns an integer beyond 64 bits into a float, and accepts a NUL), so a cheap scan
    checks its answer; when the scan cannot vouch for it, or orjson refuses the body, the standard
    library decodes it again strictly (runs.json_strict) and names the field at fault. django-ninja
    turns the refusal into a 400, and api.errors puts the field's name in its detail."""

    def parse_body(self, request):
        body = request.body
        try:
            value = orjson.loads(body)
        except orjson.JSONDecodeError:
            pass
        else:
            if _exact(body, value):
                return value
        return json_loads_strict(body, root="body")


api = NinjaAPI(
    parser=_OrjsonParser(),
    title="Reckon API",
    version="1",
    description=(
        "Agents append their run logs under a lease; operators read runs, uncertain calls and policies, "
        "and record decisions. Machines authenticate with `Authorization: Bearer <token>`; console users "
        "with their session (and the CSRF token on writes)."
    ),
    urls_namespace="api",
)
errors_register(api)
