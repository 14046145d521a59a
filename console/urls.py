from django.contrib import admin
from django.urls import include, path

from console.api import api, api_not_found
from console.metrics import metrics_view

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/", api.urls),
    path("api/<path:rest>", api_not_found),
    path("metrics", metrics_view, name="metrics"),
    path("", include("console.urls_screens")),
]
