"""The console's permission matrix: every console URL, with the status each named actor must get
(tests/console/test_permissions.py walks it; tests/test_role_matrix.py reuses its routes)."""

R = ("oncall", "compliance", "manager", "outsider", "admin", "anonymous")


def everyone_who_reads(ok=200):
    return {"oncall": ok, "compliance": ok, "manager": ok, "outsider": 403, "admin": ok, "anonymous": 302}


def only(*roles, ok=200):
    return {r: (ok if r in roles else 302 if r == "anonymous" else 403) for r in R}


RUN = "run-q3-recon"
CALL = "<call>"  # replaced by the conflict call's pk at run time

# (method, url name, args, data, expected status per actor)
MATRIX = [
    ("get", "console:home", (), None, {"oncall": 302, "compliance": 302, "manager": 302, "outsider": 403, "admin": 302, "anonymous": 302}),
    ("get", "console:runs", (), None, everyone_who_reads()),
    ("get", "console:run", (RUN,), None, everyone_who_reads()),
    ("get", "console:run_state", (RUN,), {"at": 3}, everyone_who_reads(302)),
    ("get", "console:run_event_json", (RUN, 3), None, everyone_who_reads()),
    ("get", "console:run_state_json", (RUN,), {"at": 3}, everyone_who_reads()),
    ("get", "console:run_export", (RUN, "jsonl"), None, only("compliance", "admin")),
    ("get", "console:run_export", (RUN, "csv"), None, only("compliance", "admin")),
    ("get", "console:run_export_digest", (RUN, "jsonl"), None, only("compliance", "admin")),
    # post_correction's policy marks account sensitive; a reveal is for holders of view_sensitive only.
    ("post", "console:reveal", (RUN, 11), {"path": "arguments.account", "reason": "audit"}, only("compliance", "admin")),
    # The evidence bundle: masked by default, for reviewers who may export (unmasked needs a reason).
    ("post", "console:run_evidence", (RUN,), {}, only("compliance", "admin")),
    ("post", "console:run_evidence", (RUN,), {"unmasked": "1"}, only("compliance", "admin", ok=400)),
    # On a call: holders of view_sensitive, and whoever may decide it while it can be decided.
    ("post", "console:call_reveal", (CALL,), {"side": "observed", "field": "account", "reason": "INC-7"}, only("oncall", "compliance", "admin")),
    # Each signed-in person's own time zone; it shows nothing of anyone else's.
    ("get", "console:preferences", (), None, {**{r: 200 for r in R}, "anonymous": 302}),
    ("get", "console:overview", (), None, everyone_who_reads()),
    ("get", "console:queue", (), None, everyone_who_reads()),
    ("get", "console:decisions", (), None, everyone_who_reads()),
    ("get", "console:search", (), None, everyone_who_reads()),
    ("get", "console:open_badge", (), None, everyone_who_reads()),
    ("get", "console:access", (), None, only("compliance", "admin")),
    ("get", "console:policies", (), None, only("admin")),
    ("post", "console:policies", (), {"tool": "x"}, only("admin", ok=302)),
    ("get", "console:notifications", (), None, only("admin")),
    ("get", "console:notification_config", (), None, only("admin")),
    ("post", "console:notification_channel", (), {"name": "x"}, only("admin", ok=302)),
    ("post", "console:notification_route", (), {}, only("admin", ok=302)),
    ("post", "console:notification_config_preview", (), {"text": ""}, only("admin", ok=302)),
    ("post", "console:notification_config_apply", (), {}, only("admin", ok=302)),
    ("get", "console:call", (CALL,), None, everyone_who_reads()),
    # Writes sent without their required fields: a permitted actor gets 400, and nothing is written.
    ("post", "console:call_decide", (CALL,), {}, only("oncall", "admin", ok=400)),
    ("post", "console:call_claim", (CALL,), {"seen_version": "x"}, only("oncall", "admin", ok=400)),
    ("post", "console:call_release", (CALL,), {"seen_version": "x"}, only("oncall", "admin", ok=400)),
    ("post", "console:call_assign", (CALL,), {}, only("oncall", "admin", ok=400)),
    ("post", "console:call_note", (CALL,), {"text": ""}, only("oncall", "compliance", "admin", ok=400)),
    ("post", "console:queue_bulk", (), {}, everyone_who_reads(400)),
    # The reports: managers and administrators (view_reports); every call's CSV is masked per reader.
    ("get", "console:reports", (), None, only("manager", "admin")),
    ("get", "console:report_csv", ("volume",), None, only("manager", "admin")),
    ("get", "console:report_csv", ("calls",), None, only("manager", "admin")),
    ("get", "console:report_table", ("times-by-risk",), None, only("manager", "admin")),
]

# Routes that are deliberately open: signing in, and signing out (which only ends a session); the
# single sign-on start and callback (404 while it is not configured: tests/access/test_sign_in_settings.py).
PUBLIC = {"console:login", "console:logout", "console:oidc_start", "console:oidc_callback"}
