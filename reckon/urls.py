from django.contrib import admin
from django.urls import include, path

from reckon.health import healthz, readyz

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("readyz", readyz, name="readyz"),
    path("admin/", admin.site.urls),
    path("", include("api.urls")),
    path("", include("console.urls")),
]
