"""The console's screens, included at the site root by reckon/urls.py under the ``console`` namespace."""

from django.urls import path

from console import evidence, notifications, oidc, views, views_call, views_find, views_reports

app_name = "console"

urlpatterns = [
    path("", views.home, name="home"),
    path("login/", views.LoginView.as_view(), name="login"),
    path("logout/", oidc.sign_out, name="logout"),
    path("oidc/start/", oidc.OidcStart.as_view(), name="oidc_start"),
    path("oidc/callback/", oidc.OidcCallback.as_view(), name="oidc_callback"),
    path("runs/", views.runs_list, name="runs"),
    path("runs/<str:run_id>/", views.run_detail, name="run"),
    path("runs/<str:run_id>/state/", views.run_state_view, name="run_state"),
    path("runs/<str:run_id>/export.<str:fmt>.sha256", views.run_export_digest, name="run_export_digest"),
    path("runs/<str:run_id>/export.<str:fmt>", views.run_export, name="run_export"),
    path("runs/<str:run_id>/events/<int:seq>/reveal/", views.reveal, name="reveal"),
    path("runs/<str:run_id>/events/<int:seq>.json", views.run_event_json, name="run_event_json"),
    path("runs/<str:run_id>/state.json", views.run_state_json, name="run_state_json"),
    path("runs/<str:run_id>/evidence.zip", evidence.run_evidence, name="run_evidence"),
]
urlpatterns += [
    path("overview/", views.overview, name="overview"),
    path("queue/", views.queue, name="queue"),
    path("queue/bulk/", views.queue_bulk, name="queue_bulk"),
    path("calls/<int:pk>/", views_call.call_detail, name="call"),
    path("calls/<int:pk>/decide/", views_call.call_decide, name="call_decide"),
    path("calls/<int:pk>/claim/", views_call.call_claim, name="call_claim"),
    path("calls/<int:pk>/release/", views_call.call_release, name="call_release"),
    path("calls/<int:pk>/assign/", views_call.call_assign, name="call_assign"),
    path("calls/<int:pk>/note/", views_call.call_note, name="call_note"),
    path("calls/<int:pk>/reveal/", views.call_reveal, name="call_reveal"),
    path("decisions/", views.decisions, name="decisions"),
    path("access/", views.access_log, name="access"),
    path("policies/", views.policies, name="policies"),
    path("notifications/", views.notifications, name="notifications"),
    path("notifications/config/", notifications.config_screen, name="notification_config"),
    path("notifications/config/channel/", notifications.channel_post, name="notification_channel"),
    path("notifications/config/route/", notifications.route_post, name="notification_route"),
    path("notifications/config/preview/", notifications.file_preview, name="notification_config_preview"),
    path("notifications/config/apply/", notifications.file_apply, name="notification_config_apply"),
    path("search/", views_find.search, name="search"),
    path("nav/open-count/", views_find.open_badge, name="open_badge"),
    path("preferences/", views.preferences, name="preferences"),
    path("reports/", views_reports.reports_screen, name="reports"),
    path("reports/<str:table>.csv", views_reports.report_csv, name="report_csv"),
    path("reports/<str:table>/", views_reports.report_table, name="report_table"),
]
