"""Health probes for process managers and load balancers; no authentication, no session.

``/healthz``: the process answers (liveness). It touches nothing else, so a database outage never
gets healthy web processes restarted. ``/readyz``: this process can serve: the database answers,
every migration is applied, and the broker (Redis, when REDIS_URL is set) answers; otherwise 503
with JSON naming each thing that is not ready. Neither is logged by Django's request logger (a 503
from a probe every few seconds would be noise) nor, under reckon/gunicorn_conf.py, as access lines.
"""

from __future__ import annotations

from django.conf import settings
from django.db import DatabaseError, connection
from django.db.migrations.executor import MigrationExecutor
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

_migrated = False  # once every migration is applied, this process's code never needs the check again
_redis: dict = {}  # REDIS_URL -> one client (and its connection pool) per process


def _quiet(response: JsonResponse) -> JsonResponse:
    response._has_been_logged = True  # Django's log_response skips a response already logged
    return response


@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    return _quiet(JsonResponse({"status": "ok"}))


def _database() -> str | None:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except DatabaseError as exc:
        return f"database: {str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}"
    return None


def _migrations() -> str | None:
    global _migrated
    if _migrated:
        return None
    executor = MigrationExecutor(connection)
    plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    if plan:
        names = ", ".join(f"{m.app_label}.{m.name}" for m, _ in plan[:5])
        return f"migrations: {len(plan)} not applied ({names}{', ...' if len(plan) > 5 else ''}): run manage.py migrate"
    _migrated = True
    return None


def _broker() -> str | None:
    if not settings.REDIS_URL:
        return None  # tasks run in-process: there is no broker to reach
    import redis

    client = _redis.get(settings.REDIS_URL)
    if client is None:
        client = _redis[settings.REDIS_URL] = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)
    try:
        client.ping()
    except (redis.RedisError, OSError) as exc:
        return f"broker: {exc}"
    return None


@never_cache
@require_GET
def readyz(request: HttpRequest) -> JsonResponse:
    problems = []
    db = _database()
    problems.append(db)
    if db is None:
        problems.append(_migrations())
    problems.append(_broker())
    problems = [p for p in problems if p]
    if problems:
        return _quiet(JsonResponse({"status": "not ready", "problems": problems}, status=503))
    return _quiet(JsonResponse({"status": "ready"}))
