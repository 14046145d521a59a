"""The HTTP API's one NinjaAPI instance, with every error mapped once (api.errors).

Routers are added to it in api/urls.py, so a module that needs the instance (the idempotency
records render their stored responses with it) can import it without importing the routers.
"""

from __future__ import annotations

import orjson
from ninja import NinjaAPI
from ninja.parser import Parser

from api.errors import errors_register
from api.throttles import TokenRateThrottle


class _OrjsonParser(Parser):
    """Request bodies decoded with orjson: a 100-event append spends less time in JSON than in
    validation this way. Stricter than the standard library (no NaN, no lone surrogates, no
    integers beyond 64 bits), which the store would refuse anyway; such a body is a 400."""

    def parse_body(self, request):
        return orjson.loads(request.body)


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
