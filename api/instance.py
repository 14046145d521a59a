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
from api.throttles import TokenRateThrottle
from runs.json_strict import json_loads_strict

# A colon after a closing quote with space between; when there is none, every key of the document
# ends in the two bytes '":' exactly once, so counting them (in C) bounds the keys the text holds.
_SPACED_KEY = re.compile(rb'"\s+:')
_INT_LIMIT = 2**63


def _keys_in(value) -> int | None:
    """How many keys ``value`` holds, or None when a number in it may not be what was sent: an int
    outside 64 bits, or a float as large as one (orjson's reading of an integer beyond 64 bits; a
    genuine float that large merely takes the strict path, which keeps it)."""
    count, stack = 0, [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            count += len(v)
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
        elif isinstance(v, (int, float)) and not isinstance(v, bool) and not -_INT_LIMIT <= v < _INT_LIMIT:
            return None
    return count


def _exact(body: bytes, value) -> bool:
    """True when orjson's answer is surely what was sent: no NUL escape, no number outside 64
    bits, and as many keys decoded as the text holds (a duplicate key would have merged).
    ``'":'`` inside a string only raises the count, so a wrong guess can only send the body to the
    strict decoder, never let a duplicate through."""
    if b"\\u0000" in body or b'\\\\":' in body or _SPACED_KEY.search(body):
        return False
    # '\":' is an escaped quote inside a string (a tool call's signature holds JSON text), never the
    # end of a key, once '\\":' (a key ending in an escaped backslash) has been ruled out above.
    return _keys_in(value) == body.count(b'":') - body.count(b'\\":')


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
    throttle=[TokenRateThrottle()],
)
errors_register(api)
