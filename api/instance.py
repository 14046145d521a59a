"""The HTTP API's one NinjaAPI instance, with every error mapped once (api.errors).

Routers are added to it in api/urls.py, so a module that needs the instance (the idempotency
records render their stored responses with it) can import it without importing the routers.
"""

from __future__ import annotations

from ninja import NinjaAPI
from ninja.openapi.docs import Swagger
from ninja.parser import Parser

from access.roles import requires
from api.errors import errors_register
from api.openapi_rules import openapi_rules
from api.throttles import TokenRateThrottle
from runs.json_strict import json_loads_strict_bytes


class _StrictParser(Parser):
    """Request bodies decoded as the importer decodes a log line (runs.json_strict): orjson, with
    a scan of the bytes proving its answer is what was sent (no duplicate key merged, no integer
    beyond 64 bits turned into a float, no NUL); a body the scan cannot vouch for is decoded again
    strictly, which names the field at fault. django-ninja turns the refusal into a 400, and
    api.errors puts the field's name in its detail."""

    def parse_body(self, request):
        return json_loads_strict_bytes(request.body, root="body")


class _ConsoleSwagger(Swagger):
    """The interactive docs page (/api/docs), for people signed in to the console: an anonymous
    visitor is sent to sign in, a user without the console gets 403. It is ninja's own template,
    which loads Swagger UI from Reckon's static files (the "ninja" app in settings) under the
    console's CSP. The document it reads, /api/openapi.json, stays public: agents' tools and client
    generators fetch it without a session, and it holds no data."""

    def render_page(self, request, api, **kwargs):
        return requires("view_console")(super().render_page)(request, api, **kwargs)


class _ReckonAPI(NinjaAPI):
    def get_openapi_schema(self, *args, **kwargs):
        """ninja's document with the rules the views check written in (api.openapi_rules)."""
        return openapi_rules(super().get_openapi_schema(*args, **kwargs))


api = _ReckonAPI(
    parser=_StrictParser(),
    title="Reckon API",
    version="1",
    description=(
        "Agents append their run logs under a lease; operators read runs, uncertain calls and policies, "
        "and record decisions. Machines authenticate with `Authorization: Bearer <token>`; console users "
        "with their session (and the CSRF token on writes)."
    ),
    urls_namespace="api",
    docs=_ConsoleSwagger(),
    throttle=[TokenRateThrottle()],
)
errors_register(api)
