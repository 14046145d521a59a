"""Reckon's settings, all from the environment (see reckon/env.py for the strict helpers).

DATABASE_URL   default: an embedded SQLite file under var/ (WAL, IMMEDIATE transactions)
REDIS_URL      absent: Celery runs tasks eagerly, in-process
SECRET_KEY     absent: generated into var/secret_key for local use; required when DEBUG is off
DEBUG          default: on (local use); production sets DEBUG=false and then must give SECRET_KEY
PROMETHEUS_MULTIPROC_DIR   default: var/prometheus; the folder the processes' metrics share ("": off)
RECKON_LOGIN_*, RECKON_API_*   sign-in lockout and API rate limits (docs/configuration.md)
STATIC_ROOT    default: var/static in the checkout; where `collectstatic` (run by `make install`) puts the files
RECKON_HTTPS, RECKON_TLS_PROXY, RECKON_HSTS_*, CSRF_TRUSTED_ORIGINS: see "Served over HTTPS" below
RECKON_MAX_EVENT_BYTES, RECKON_MAX_RUN_BYTES, RECKON_MAX_REQUEST_BYTES   size limits: see "Sizes" below
RECKON_OUTBOUND_ALLOW   default: none; hosts (or host:port) on this machine or a private network that lookups and notifications may call
RECKON_LOOKUP_MODULES   default: none; the modules whose functions the python adapter may call
RECKON_BENCH   default: off; installs the benchmarks app (set by `manage.py bench` itself)
RECKON_OIDC_*, RECKON_PASSWORD_SIGN_IN, RECKON_BREAK_GLASS_USER   single sign-on (docs/configuration.md)
"""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path

from datetime import timedelta

import dj_database_url
from csp.constants import NONE, SELF
from django.core.exceptions import ImproperlyConfigured

from reckon.env import envbool, envint, envlist, envstr, envweekly
from reckon.oidc_env import oidc_group_map, oidc_settings_check

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(envstr("RECKON_VAR_DIR", str(BASE_DIR / "var")))

DATABASE_URL = envstr("DATABASE_URL", "")
DEBUG = envbool("DEBUG", default=True)


def _secret_key() -> str:
    key = envstr("SECRET_KEY")
    if key:
        return key
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY (or SECRET_KEY_FILE) is required when DEBUG is off")
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    path = VAR_DIR / "secret_key"
    if not path.exists():
        path.write_text(secrets.token_urlsafe(50), encoding="utf-8")
        path.chmod(0o600)
    return path.read_text(encoding="utf-8").strip()


SECRET_KEY = _secret_key()
ALLOWED_HOSTS = [h.strip() for h in (envstr("ALLOWED_HOSTS", "127.0.0.1,localhost,testserver") or "").split(",") if h.strip()]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "template_partials",
    # django-ninja as an app: its docs page renders its own template with the Swagger UI files its
    # wheel ships (ninja/static/ninja/, collected with the rest), never the CDN copy it falls back to.
    "ninja",
    "runs",
    "recovery",
    "notify",
    "access",
    "evidence",
    "api",
    "console",
    "cli",
    "demo",
    "axes",
]
# The benchmarks (`manage.py bench`, docs/benchmarks.md) are an app of the source checkout, not of
# the wheel or production: installed only where benchmarks run. manage.py sets RECKON_BENCH=1 for
# its `bench` command, and the test session for itself (tests/session_env.py).
if envbool("RECKON_BENCH", default=False):
    from importlib.util import find_spec

    if find_spec("bench") is None:
        raise ImproperlyConfigured("RECKON_BENCH is set, but the bench app is not installed: it ships with the source checkout, not the wheel")
    INSTALLED_APPS.insert(INSTALLED_APPS.index("axes"), "bench")

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # WhiteNoise answers /static/ before anything else runs: no session, no database, no CSP.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "reckon.middleware.NoStoreMiddleware",
    "csp.middleware.CSPMiddleware",
    "api.middleware.ApiErrorsMiddleware",
    "reckon.middleware.UnstorableTextMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # A session signed in through the identity provider is bounded and re-checked there (console/oidc.py).
    "console.oidc.SessionBoundMiddleware",
    "console.middleware.ConsoleErrorsMiddleware",
    "console.session.SignedOutMiddleware",
    "console.middleware.BidiVisibleMiddleware",
    "console.middleware.ReaderTimeZoneMiddleware",
    # Last, as django-axes asks: it turns a locked-out sign-in into its lockout answer.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "reckon.urls"
WSGI_APPLICATION = "reckon.wsgi.application"
ASGI_APPLICATION = "reckon.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "console.oidc.sign_in_options",
            ],
        },
    },
]


def _databases() -> dict:
    if DATABASE_URL:
        try:
            db = dj_database_url.parse(DATABASE_URL, conn_max_age=envint("DATABASE_CONN_MAX_AGE", 60, minimum=0))
        except Exception as exc:  # dj-database-url raises several types for a malformed URL
            raise ImproperlyConfigured(f"DATABASE_URL cannot be parsed: {exc}") from None
        if db["ENGINE"] not in ("django.db.backends.postgresql", "django.db.backends.sqlite3"):
            raise ImproperlyConfigured(f"DATABASE_URL names {db['ENGINE']}; Reckon supports PostgreSQL and SQLite")
        if db["ENGINE"] == "django.db.backends.postgresql":
            db.setdefault("TEST", {})["NAME"] = envstr("TEST_DATABASE_NAME", f"test_{db['NAME']}")
            # Django leaves psycopg's prepare_threshold at None, which turns preparing off for the
            # whole connection, even for a cursor that asks with prepare=True. The store's hot
            # statements (the fenced append, the replay read, the lease statements) ask for it:
            # planning the append's CTE on every call cost about as much as the commit. The ORM
            # keeps client-side binding and never prepares. DATABASE_PREPARE_THRESHOLD=-1 turns
            # preparing off, for a connection proxy that cannot keep prepared statements.
            threshold = envint("DATABASE_PREPARE_THRESHOLD", 5, minimum=-1)
            db.setdefault("OPTIONS", {})["prepare_threshold"] = None if threshold < 0 else threshold
    else:
        VAR_DIR.mkdir(parents=True, exist_ok=True)
        db = {"ENGINE": "django.db.backends.sqlite3", "NAME": str(VAR_DIR / "reckon.sqlite3")}
    if db["ENGINE"] == "django.db.backends.sqlite3":
        # SQLite serves concurrent writers only in WAL mode with IMMEDIATE transactions (a writer
        # takes the write lock at BEGIN instead of failing to upgrade a read lock later) and a busy
        # timeout long enough for the other writer's commit.
        db["OPTIONS"] = {
            "transaction_mode": "IMMEDIATE",
            "timeout": envint("SQLITE_BUSY_TIMEOUT_S", 20, minimum=1),
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;",
        }
        db.setdefault("TEST", {})["NAME"] = str(VAR_DIR / "test-reckon.sqlite3")
    return {"default": db}


DATABASES = _databases()
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "/login/"
LOGIN_REDIRECT_URL = "/"
# A form whose security token is missing or stale says that nothing was recorded (console/session.py).
CSRF_FAILURE_VIEW = "console.session.csrf_failure"

# Sign-in lockout (django-axes): after RECKON_LOGIN_FAILURE_LIMIT failed sign-ins for one username,
# or from one client address, further attempts for it (the right password included) are answered
# with axes' lockout answer, 429 and a one-line text, until RECKON_LOGIN_COOLOFF_S have passed
# (a failed attempt during the lockout starts the cool-off again). Attempts are kept in the
# database (axes' tables), so every web process shares them; a success resets that user's count.
# Behind proxies, RECKON_PROXY_COUNT says which X-Forwarded-For hop is the client
# (api/throttles.py client_address, shared with the API's limits).
#
# The password backend (access/oidc.py PasswordBackend) refuses everyone but RECKON_BREAK_GLASS_USER
# when RECKON_PASSWORD_SIGN_IN is off; the OpenID Connect backend signs people in through the
# organisation's identity provider when RECKON_OIDC_ISSUER is set (the block below).
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "access.oidc.PasswordBackend", "access.oidc.OidcBackend"]
AXES_FAILURE_LIMIT = envint("RECKON_LOGIN_FAILURE_LIMIT", 10, minimum=1)
AXES_COOLOFF_TIME = timedelta(seconds=envint("RECKON_LOGIN_COOLOFF_S", 900, minimum=1))
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]  # either alone locks: per user and per address
AXES_RESET_ON_SUCCESS = True
AXES_HTTP_RESPONSE_CODE = 429
AXES_CLIENT_IP_CALLABLE = "api.throttles.client_address"
AXES_VERBOSE = False  # a lockout is logged once as a warning by axes; no banner at start-up
RECKON_PROXY_COUNT = envint("RECKON_PROXY_COUNT", 0, minimum=0)

# Sign-in with the organisation's identity provider (OpenID Connect; access/oidc.py, docs/security.md
# "Single sign-on"). Off while RECKON_OIDC_ISSUER is empty. The endpoints and keys come from the
# issuer's discovery document, fetched when first needed (never at start-up) and cached.
RECKON_OIDC_ISSUER = (envstr("RECKON_OIDC_ISSUER", "") or "").strip().rstrip("/")
RECKON_OIDC_CLIENT_ID = (envstr("RECKON_OIDC_CLIENT_ID", "") or "").strip()
RECKON_OIDC_CLIENT_SECRET = envstr("RECKON_OIDC_CLIENT_SECRET", "") or ""
RECKON_OIDC_SCOPES = " ".join((envstr("RECKON_OIDC_SCOPES", "openid email profile") or "").split())
RECKON_OIDC_GROUPS_CLAIM = (envstr("RECKON_OIDC_GROUPS_CLAIM", "groups") or "").strip()
RECKON_OIDC_TENANTS_CLAIM = (envstr("RECKON_OIDC_TENANTS_CLAIM", "") or "").strip()
RECKON_OIDC_GROUP_MAP = oidc_group_map("RECKON_OIDC_GROUP_MAP", envstr("RECKON_OIDC_GROUP_MAP", "") or "")
RECKON_OIDC_SIGN_ALGS = envlist("RECKON_OIDC_SIGN_ALGS", ("RS256",), pattern=r"(RS|PS|ES)(256|384|512)", what="an asymmetric JWS algorithm (RS256, PS256, ES256, ...)")
RECKON_OIDC_SESSION_S = envint("RECKON_OIDC_SESSION_S", 8 * 3600, minimum=1)
RECKON_OIDC_TIMEOUT_S = envint("RECKON_OIDC_TIMEOUT_S", 5, minimum=1)
RECKON_OIDC_CACHE_S = envint("RECKON_OIDC_CACHE_S", 3600, minimum=0)
RECKON_OIDC_LEEWAY_S = envint("RECKON_OIDC_LEEWAY_S", 30, minimum=0)
RECKON_OIDC_BUTTON = (envstr("RECKON_OIDC_BUTTON", "Sign in with your organisation") or "").strip()
RECKON_PASSWORD_SIGN_IN = envbool("RECKON_PASSWORD_SIGN_IN", default=True)
RECKON_BREAK_GLASS_USER = (envstr("RECKON_BREAK_GLASS_USER", "") or "").strip()
oidc_settings_check(
    issuer=RECKON_OIDC_ISSUER, client_id=RECKON_OIDC_CLIENT_ID, scopes=RECKON_OIDC_SCOPES, groups_claim=RECKON_OIDC_GROUPS_CLAIM,
    group_map=RECKON_OIDC_GROUP_MAP, password_sign_in=RECKON_PASSWORD_SIGN_IN, break_glass=RECKON_BREAK_GLASS_USER,
)

# API limits (api/throttles.py): 429 with Retry-After. Counted in the cache below, so shared by
# every gunicorn worker when it is Redis.
RECKON_API_AUTH_FAILURES = envint("RECKON_API_AUTH_FAILURES", 30, minimum=1)
RECKON_API_AUTH_WINDOW_S = envint("RECKON_API_AUTH_WINDOW_S", 300, minimum=1)
RECKON_API_TOKEN_RATE = envint("RECKON_API_TOKEN_RATE", 12000, minimum=0)  # 0: no per-token limit
RECKON_API_TOKEN_WINDOW_S = envint("RECKON_API_TOKEN_WINDOW_S", 60, minimum=1)

LANGUAGE_CODE = "en-gb"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

# Static files: collected by `manage.py collectstatic` (the Makefile's install target runs it) into
# STATIC_ROOT, with hashed names and gzip/brotli copies, and served by WhiteNoise from every process
# that serves Reckon (gunicorn, runserver, the test servers): no separate web server needed. The
# default sits in the checkout rather than under RECKON_VAR_DIR: the files belong to the code, not
# to a deployment's data, and a process pointed at another var dir still finds them.
STATIC_URL = "static/"
STATIC_ROOT = Path(envstr("STATIC_ROOT", "") or BASE_DIR / "var" / "static")
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}
# Hashed names never change content: a year in browsers' caches (WhiteNoise's own choice).
WHITENOISE_MAX_AGE = 31536000

# Served over HTTPS (docs/security.md). RECKON_HTTPS=true: the site is reached over HTTPS only, so
# cookies carry Secure, plain-HTTP requests are redirected and HSTS tells browsers to stay on HTTPS.
# RECKON_TLS_PROXY=true: a proxy in front terminates TLS and sets X-Forwarded-Proto; it must
# overwrite any X-Forwarded-Proto the client sent, otherwise a client could claim HTTPS.
RECKON_HTTPS = envbool("RECKON_HTTPS", default=False)
if envbool("RECKON_TLS_PROXY", default=False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = RECKON_HTTPS
SECURE_SSL_REDIRECT = envbool("RECKON_SSL_REDIRECT", default=RECKON_HTTPS)
SECURE_HSTS_SECONDS = envint("RECKON_HSTS_SECONDS", 31536000 if RECKON_HTTPS else 0, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = envbool("RECKON_HSTS_INCLUDE_SUBDOMAINS", default=True)
SECURE_HSTS_PRELOAD = envbool("RECKON_HSTS_PRELOAD", default=False)
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SESSION_COOKIE_HTTPONLY = True
CSRF_TRUSTED_ORIGINS = [o.strip() for o in (envstr("CSRF_TRUSTED_ORIGINS", "") or "").split(",") if o.strip()]
for _origin in CSRF_TRUSTED_ORIGINS:
    if "://" not in _origin:
        raise ImproperlyConfigured(f"CSRF_TRUSTED_ORIGINS={_origin!r} needs a scheme: write https://{_origin}")
# Preloading is a promise to browser vendors that is slow to undo, so it stays the deployer's
# explicit choice (RECKON_HSTS_PRELOAD=true); without it, check --deploy need not nag about it.
SILENCED_SYSTEM_CHECKS = [] if SECURE_HSTS_PRELOAD else ["security.W021"]

# Content-Security-Policy (django-csp): only Reckon's own scripts, styles and images. No inline
# script or style anywhere: templates keep styles in console.css and htmx's injected indicator
# styles are turned off by the htmx-config meta tag in the base template. The API's Swagger page
# (/api/docs) lives under the same policy: ninja's template loads Swagger UI from Reckon's static
# files and passes its settings as JSON, not as an inline script (tests/console/test_api_docs.py).
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF],
        "img-src": [SELF, "data:"],
        "connect-src": [SELF],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
        "base-uri": [NONE],
        "object-src": [NONE],
    },
}

# Sizes (docs/security.md). An event's payload, as the store writes it (UTF-8 JSON, keys sorted:
# the text the chain hashes), may hold RECKON_MAX_EVENT_BYTES; a run's payloads together
# RECKON_MAX_RUN_BYTES (0: no limit), kept on the run row and checked by the append's own fence
# (runs/store.py), so every writer (the API, the client on the store, the decision services, the
# importer) meets the same two limits. 256 KiB is far above any tool call's arguments or a model
# turn's text, and small enough that a screen showing a hundred events stays bounded; 512 MiB
# admits the 1,000,000-event log of docs/scale.md (about 300 MB of payloads) and bounds what a
# replay of one run may hold. A request body may be RECKON_MAX_REQUEST_BYTES (Django's
# DATA_UPLOAD_MAX_MEMORY_SIZE): 8 MiB takes a batch of 1,000 events (AppendIn's most) of 8 KiB
# each, or 32 events at the event limit even with every character escaped as \uXXXX.
RECKON_MAX_EVENT_BYTES = envint("RECKON_MAX_EVENT_BYTES", 256 << 10, minimum=1024)
RECKON_MAX_RUN_BYTES = envint("RECKON_MAX_RUN_BYTES", 512 << 20, minimum=0)
if RECKON_MAX_RUN_BYTES and RECKON_MAX_RUN_BYTES < RECKON_MAX_EVENT_BYTES:
    raise ImproperlyConfigured(f"RECKON_MAX_RUN_BYTES ({RECKON_MAX_RUN_BYTES}) must be at least RECKON_MAX_EVENT_BYTES ({RECKON_MAX_EVENT_BYTES}), or 0 for no limit")
DATA_UPLOAD_MAX_MEMORY_SIZE = envint("RECKON_MAX_REQUEST_BYTES", 8 << 20, minimum=1024)

# Runs: lease length for writers that do not name one.
RECKON_LEASE_SECONDS = envint("RECKON_LEASE_SECONDS", 30, minimum=1)
# Snapshots (runs/snapshots.py): the default interval for runs without their own policy; 0 means
# never. No run shorter than the minimum is snapshotted: below it a full replay is cheap enough.
RECKON_SNAPSHOT_INTERVAL = envint("RECKON_SNAPSHOT_INTERVAL", 500, minimum=0)
RECKON_SNAPSHOT_MIN_EVENTS = envint("RECKON_SNAPSHOT_MIN_EVENTS", 2000, minimum=0)
# Streaming reads and writes of long logs (docs/scale.md): events the importer checks and writes
# at a time, and events an export, an event page or a replay reads from the database at a time.
# Memory follows these, never the length of a log.
RECKON_IMPORT_CHUNK = envint("RECKON_IMPORT_CHUNK", 5000, minimum=1)
# The longest line (bytes, without its newline) an import reads; a longer one rejects the file. Above
# any event the API accepts (a request body is at most DATA_UPLOAD_MAX_MEMORY_SIZE, 2.5 MB).
RECKON_IMPORT_MAX_LINE_BYTES = envint("RECKON_IMPORT_MAX_LINE_BYTES", 4 << 20, minimum=1024)
RECKON_READ_CHUNK = envint("RECKON_READ_CHUNK", 2000, minimum=1)

# Process metrics (runs/measurements.py): prometheus_client's multiprocess mode. Every process that
# replays (gunicorn and Celery workers, commands, agents on the store) writes its figures to its own
# files in this folder and /metrics merges them. The client reads the variable when it is first
# imported, so it is exported here, before any Reckon module imports the client, and inherited by
# child processes. One folder per host: it is cleaned of dead processes' files at start-up
# (runs/metrics_dir.py), never here, since every worker loads these settings. "" turns it off:
# each process then keeps its figures to itself and /metrics shows only its own.
PROMETHEUS_MULTIPROC_DIR = envstr("PROMETHEUS_MULTIPROC_DIR", str(VAR_DIR / "prometheus")) or ""
if "prometheus_client" in sys.modules and bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR")) != bool(PROMETHEUS_MULTIPROC_DIR):
    # Imported earlier, the client chose its mode from the variable as it was then: the figures
    # would silently stay in one process, or be written to a folder nobody merges.
    raise ImproperlyConfigured(
        "prometheus_client was imported before reckon.settings set PROMETHEUS_MULTIPROC_DIR "
        f"(settings: {PROMETHEUS_MULTIPROC_DIR!r}, at the client's import: {os.environ.get('PROMETHEUS_MULTIPROC_DIR', '')!r})"
    )
if PROMETHEUS_MULTIPROC_DIR:
    PROMETHEUS_MULTIPROC_DIR = str(Path(PROMETHEUS_MULTIPROC_DIR).resolve())
    Path(PROMETHEUS_MULTIPROC_DIR).mkdir(parents=True, exist_ok=True)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = PROMETHEUS_MULTIPROC_DIR
else:
    os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)

# Celery: Redis when REDIS_URL is set, otherwise tasks run eagerly in-process.
REDIS_URL = envstr("REDIS_URL", "")
CELERY_BROKER_URL = REDIS_URL or "memory://"
CELERY_RESULT_BACKEND = None
CELERY_TASK_ALWAYS_EAGER = not REDIS_URL
# The queue tasks are sent to and workers consume; deployments sharing one Redis each name their own.
CELERY_TASK_DEFAULT_QUEUE = envstr("CELERY_DEFAULT_QUEUE", "celery") or "celery"
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": envint("CELERY_VISIBILITY_TIMEOUT_S", 3600, minimum=60)}
CELERY_BEAT_SCHEDULE: dict = {}

# The cache holds the API's rate-limit counters: Redis when REDIS_URL is set, so every gunicorn
# worker and host shares them; otherwise this process's memory (one process: `manage.py demo`).
if REDIS_URL:
    # Deployments (or test runs) sharing one Redis name their keys apart, as their queues.
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL, "KEY_PREFIX": envstr("CACHE_KEY_PREFIX", "reckon") or "reckon"}}
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "reckon"}}

# Recovery (recovery/): how long a recovery worker holds a run's lease, the backoff between lookups
# of a call whose outcome is still unknown, and how often beat scans for due uncertain calls.
RECKON_RECOVERY_LEASE_SECONDS = envint("RECKON_RECOVERY_LEASE_SECONDS", 60, minimum=1)
RECKON_RECOVERY_BACKOFF_S = envint("RECKON_RECOVERY_BACKOFF_S", 10, minimum=0)
RECKON_RECOVERY_BACKOFF_MAX_S = envint("RECKON_RECOVERY_BACKOFF_MAX_S", 900, minimum=1)
RECKON_RECOVERY_SCAN_S = envint("RECKON_RECOVERY_SCAN_S", 15, minimum=1)
CELERY_BEAT_SCHEDULE["recovery-scan"] = {"task": "recovery.tasks.reconcile_scan", "schedule": float(RECKON_RECOVERY_SCAN_S)}
# Outbound calls (recovery/outbound.py, docs/security.md): lookups, retries, webhooks, Slack and
# PagerDuty reach http(s) URLs without credentials whose host resolves to public addresses only; a
# loopback, link-local (169.254.169.254 among them), private, multicast, unspecified or reserved
# address is refused, when the URL is configured and again when it is called. The hosts listed here
# (a name or an address, alone for every port or as host:port) are called whatever they resolve to:
# a receiver the operator runs on this machine or the private network. Comma-separated.
RECKON_OUTBOUND_ALLOW = envlist("RECKON_OUTBOUND_ALLOW", pattern=r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)(:[0-9]{1,5})?", what="a host or host:port")
# The python adapter (recovery/adapters.py) calls functions only from these modules and the modules
# inside them (dotted names, comma-separated): a policy names code to run, so the operator says which
# code may be named. The demo needs none (its tools use the built-in demo ledger).
RECKON_LOOKUP_MODULES = envlist("RECKON_LOOKUP_MODULES", pattern=r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", what="a dotted module name")

# Evidence (runs/chain.py, evidence/signing.py, docs/evidence.md): the Ed25519 key that signs chain
# checkpoints and evidence bundles (PEM, PKCS#8; or RECKON_SIGNING_KEY_FILE). Absent with DEBUG on:
# generated into var/signing_key.pem; absent with DEBUG off: signing refuses, naming the variable.
# Checkpoints are written every RECKON_CHECKPOINT_S seconds (0: never) into RECKON_CHECKPOINT_DIR,
# which belongs outside the database's host and backups (docs/evidence.md says why).
RECKON_SIGNING_KEY = envstr("RECKON_SIGNING_KEY", "") or ""
# The public keys (PEM, one after another) of signing keys used before the current one: checkpoints
# they signed still verify after a rotation (docs/evidence.md, "Rotating the signing key").
RECKON_SIGNING_KEYS_RETIRED = envstr("RECKON_SIGNING_KEYS_RETIRED", "") or ""
RECKON_CHECKPOINT_DIR = Path(envstr("RECKON_CHECKPOINT_DIR", str(VAR_DIR / "checkpoints")) or str(VAR_DIR / "checkpoints"))
RECKON_CHECKPOINT_S = envint("RECKON_CHECKPOINT_S", 3600, minimum=0)
if RECKON_CHECKPOINT_S:
    CELERY_BEAT_SCHEDULE["chain-checkpoint"] = {"task": "evidence.tasks.checkpoint_task", "schedule": float(RECKON_CHECKPOINT_S)}

# Notifications (notify/, docs/notifications.md). Events older than the maximum age when appended
# (an imported history) notify nobody. A delivery is tried up to RECKON_NOTIFY_MAX_ATTEMPTS times,
# the wait doubling from RECKON_NOTIFY_BACKOFF_S up to the cap (with jitter), then kept as a dead
# letter. Beat's tick climbs escalation levels, repeats, writes digests and sweeps lost deliveries.
RECKON_PUBLIC_URL = envstr("RECKON_PUBLIC_URL", "http://127.0.0.1:8000") or "http://127.0.0.1:8000"
RECKON_NOTIFY_MAX_EVENT_AGE_S = envint("RECKON_NOTIFY_MAX_EVENT_AGE_S", 600, minimum=0)
RECKON_NOTIFY_MAX_ATTEMPTS = envint("RECKON_NOTIFY_MAX_ATTEMPTS", 8, minimum=1)
RECKON_NOTIFY_BACKOFF_S = envint("RECKON_NOTIFY_BACKOFF_S", 10, minimum=0)
RECKON_NOTIFY_BACKOFF_MAX_S = envint("RECKON_NOTIFY_BACKOFF_MAX_S", 3600, minimum=1)
RECKON_NOTIFY_TIMEOUT_S = envint("RECKON_NOTIFY_TIMEOUT_S", 5, minimum=1)
RECKON_NOTIFY_TICK_S = envint("RECKON_NOTIFY_TICK_S", 15, minimum=1)
# How long a worker holds a notification it is sending; past it (the worker died mid-send) the sweep hands it to another.
RECKON_NOTIFY_LOCK_S = envint("RECKON_NOTIFY_LOCK_S", 2 * RECKON_NOTIFY_TIMEOUT_S + 30, minimum=2)
if RECKON_NOTIFY_LOCK_S <= RECKON_NOTIFY_TIMEOUT_S:
    raise ImproperlyConfigured(f"RECKON_NOTIFY_LOCK_S ({RECKON_NOTIFY_LOCK_S}) must be longer than RECKON_NOTIFY_TIMEOUT_S ({RECKON_NOTIFY_TIMEOUT_S}): a send still running must not be handed to another worker")
RECKON_NOTIFY_ROUTES_CACHE_S = envint("RECKON_NOTIFY_ROUTES_CACHE_S", 5, minimum=0)  # a route change loaded elsewhere applies within this
RECKON_NOTIFY_DELIVER_ON_COMMIT = True  # the benchmark turns it off to time the outbox write alone
CELERY_BEAT_SCHEDULE["notify-tick"] = {"task": "notify.tasks.notifications_tick", "schedule": float(RECKON_NOTIFY_TICK_S)}
# The managers' weekly summary (docs/reports.md, "Summary"): sent through the notification channels
# named here (comma-separated; none: no schedule, as `manage.py report_summary` alone), of the last
# RECKON_REPORT_SUMMARY_DAYS UTC days (7, 30 or 90), every week at RECKON_REPORT_SUMMARY_AT (UTC).
RECKON_REPORT_SUMMARY_NOTIFY = envlist("RECKON_REPORT_SUMMARY_NOTIFY", pattern=r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}", what="a notification channel's name")
RECKON_REPORT_SUMMARY_DAYS = envint("RECKON_REPORT_SUMMARY_DAYS", 7, minimum=1)
if RECKON_REPORT_SUMMARY_DAYS not in (7, 30, 90):  # recovery.reports.PERIOD_DAYS (a test keeps them one)
    raise ImproperlyConfigured(f"RECKON_REPORT_SUMMARY_DAYS={RECKON_REPORT_SUMMARY_DAYS} must be 7, 30 or 90")
RECKON_REPORT_SUMMARY_AT = envweekly("RECKON_REPORT_SUMMARY_AT", "mon 08:00")
if RECKON_REPORT_SUMMARY_NOTIFY:
    from celery.schedules import crontab

    _day, _hour, _minute = RECKON_REPORT_SUMMARY_AT
    CELERY_BEAT_SCHEDULE["report-summary"] = {
        "task": "notify.tasks.report_summary_send",
        "schedule": crontab(day_of_week=_day, hour=_hour, minute=_minute),
        "kwargs": {"channels": list(RECKON_REPORT_SUMMARY_NOTIFY), "days": RECKON_REPORT_SUMMARY_DAYS},
    }

# E-mail notifications: SMTP when EMAIL_HOST is set, otherwise printed by the console backend.
EMAIL_HOST = envstr("EMAIL_HOST", "") or ""
EMAIL_PORT = envint("EMAIL_PORT", 25, minimum=1)
EMAIL_HOST_USER = envstr("EMAIL_HOST_USER", "") or ""
EMAIL_HOST_PASSWORD = envstr("EMAIL_HOST_PASSWORD", "") or ""
EMAIL_USE_TLS = envbool("EMAIL_USE_TLS", default=False)
EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend" if EMAIL_HOST else "django.core.mail.backends.console.EmailBackend"
DEFAULT_FROM_EMAIL = envstr("DEFAULT_FROM_EMAIL", "reckon@localhost") or "reckon@localhost"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"json": {"()": "reckon.logging.JsonFormatter"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "json"}},
    "root": {"handlers": ["console"], "level": envstr("LOG_LEVEL", "WARNING")},
    # Recovery decisions and fencing rejections are logged at INFO/WARNING as JSON lines.
    "loggers": {"reckon": {"level": envstr("RECKON_LOG_LEVEL", "INFO")}},
}
