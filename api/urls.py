"""The HTTP API's URLs: /api/ (OpenAPI at /api/openapi.json, docs at /api/docs) with one router
per area, a JSON 404 for any other path under /api/, and /metrics for Prometheus."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.urls import path

from api.instance import api
from api.metrics import metrics_view
from api.recovery import router as recovery_router
from api.reports import router as reports_router
from api.runs import router as runs_router

api.add_router("/", runs_router)
api.add_router("/", recovery_router)
api.add_router("/", reports_router)


def api_not_found(request: HttpRequest, rest: str = ""):
    """Any other path under /api/: a JSON 404 rather than the console's HTML page."""
    return JsonResponse({"detail": f"no API operation at /api/{rest}", "code": "not_found"}, status=404)


urlpatterns = [
    path("api/", api.urls),
    path("api/<path:rest>", api_not_found),
    path("metrics", metrics_view, name="metrics"),
]
