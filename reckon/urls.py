from django.contrib import admin
from django.http import Http404
from django.shortcuts import render
from django.urls import include, path

from reckon.health import healthz, readyz

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("readyz", readyz, name="readyz"),
    path("admin/", admin.site.urls),
    path("", include("api.urls")),
    path("", include("console.urls")),
]


def page_not_found(request, exception):
    """Django's handler, minus the resolver's internals: an unknown address says only that."""
    message = exception.args[0] if isinstance(exception, Http404) and exception.args and isinstance(exception.args[0], str) else ""
    return render(request, "404.html", {"exception": message}, status=404)


handler404 = page_not_found
