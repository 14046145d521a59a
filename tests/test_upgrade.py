"""Upgrading a database from the layout before the move needs nothing but ``migrate``.

A fresh database is migrated to the schema of the previous release (every app at its last migration
before the move), filled the way that release filled it (the three roles on the ``console`` content
type, a user in each, an API token, an idempotency record, a run's tenant), then migrated to today.
Everyone keeps their role, the token still signs in, and the rows are where the moved models look.
A real ``manage.py`` process runs the migrations (``migrate``'s own command) and the filling
against a database of the test's own: a SQLite file always, and a PostgreSQL database too when the
suite runs on PostgreSQL.
"""

from __future__ import annotations

from contextlib import contextmanager

import hashlib
import json
import uuid
from pathlib import Path

import psycopg
import pytest
from django.db import connection
from tests.helpers import _manage_steps

ROOT = Path(__file__).resolve().parents[1]
OLD_RELEASE = [("contenttypes", "0002_remove_content_type_name"), ("auth", "0012_alter_user_first_name_max_length"), ("admin", "0003_logentry_add_action_flag_choices"), ("sessions", "0001_initial"), ("runs", "0005_event_composite_key"), ("recovery", "0003_queue_indexes"), ("console", "0002_backfill_run_tenants")]
SECRET = "rk_upgrade-test-secret-0123456789"

OLD_PERMISSIONS = {
    "view_console": "Can read queues, calls, runs, dashboards and the decision log",
    "decide_call": "Can record a decision on an uncertain call",
    "claim_call": "Can claim or assign uncertain calls",
    "add_note": "Can add a note to an uncertain call",
    "export_run": "Can export a run's events",
    "view_sensitive": "Can see sensitive argument fields unmasked (each reveal is recorded)",
    "manage_policies": "Can change tool policies",
}
OLD_GROUPS = {
    "oncall": ["view_console", "decide_call", "claim_call", "add_note"],
    "compliance": ["view_console", "export_run", "view_sensitive", "add_note"],
    "manager": ["view_console"],
}

# What the previous release wrote, with the models it had: run inside ``manage.py shell``.
FILL = f"""
from django.contrib.auth.models import Group, Permission, User
from django.contrib.contenttypes.models import ContentType
from django.db import connection
ct, _ = ContentType.objects.get_or_create(app_label="console", model="console")
perms = {{c: Permission.objects.get_or_create(content_type=ct, codename=c, defaults={{"name": n}})[0] for c, n in {OLD_PERMISSIONS!r}.items()}}
for group, codes in {OLD_GROUPS!r}.items():
    g = Group.objects.create(name=group)
    g.permissions.set([perms[c] for c in codes])
    User.objects.create_user(f"{{group}}-person", password="x").groups.add(g)
solo = User.objects.create_user("direct-grant", password="x")
solo.user_permissions.add(perms["export_run"])
with connection.cursor() as cur:
    cur.execute("INSERT INTO reckon_api_token (name, prefix, secret_sha256, scopes, tenants, created_at) VALUES (%s, %s, %s, %s, %s, CURRENT_TIMESTAMP)",
                ["billing-agent", "rk_upgr", "{hashlib.sha256(SECRET.encode()).hexdigest()}", '["read"]', '["acme"]'])
    cur.execute("INSERT INTO reckon_idempotency (owner, key, fingerprint, status_code, response, created_at) VALUES (%s, %s, %s, %s, %s, CURRENT_TIMESTAMP)",
                ["token:1", "k-1", "f" * 64, 200, '{{"ok": true}}'])
    cur.execute("INSERT INTO reckon_run_tenant (run_id, tenant) VALUES (%s, %s)", ["run-upgrade", "acme"])
print("filled", ContentType.objects.filter(app_label="console").count())
"""

CHECK = """
import json
from django.contrib.auth.models import User
from django.contrib.contenttypes.models import ContentType
from access.models import ApiToken
from access.roles import PERMISSIONS, perm
from access.tokens import token_authenticate
from api.models import IdempotencyRecord
from runs.models import RunTenant
users = {u.username: sorted(c for c in PERMISSIONS if u.has_perm(perm(c))) for u in User.objects.all()}
token = token_authenticate(secret=%r)
print(json.dumps({
    "users": users,
    "token": [token.name, token.scopes, token.tenants] if token else None,
    "idempotency": list(IdempotencyRecord.objects.values_list("owner", "key", "status_code")),
    "tenants": list(RunTenant.objects.values_list("run_id", "tenant")),
    "console_types": sorted(ContentType.objects.filter(app_label="console").values_list("model", flat=True)),
    "moved_types": sorted(f"{c.app_label}.{c.model}" for c in ContentType.objects.filter(app_label__in=["access", "api", "runs"], model__in=["access", "apitoken", "idempotencyrecord", "runtenant"])),
}))
""" % SECRET


def _upgrade(database_url: str) -> dict:
    out = _manage_steps(database_url, *OLD_RELEASE, FILL, (), CHECK)
    assert "filled" in out
    return json.loads(out.strip().splitlines()[-1])


def _assert_upgraded(doc: dict) -> None:
    # Every role keeps what it had; managers also gain the reports (access 0007 grants view_reports).
    gained = {"manager": ["view_reports"]}
    for role, codes in OLD_GROUPS.items():
        assert doc["users"][f"{role}-person"] == sorted(codes + gained.get(role, [])), role
    assert doc["users"]["direct-grant"] == ["export_run"]  # a permission granted to a user directly
    assert doc["token"] == ["billing-agent", ["read"], ["acme"]]
    assert doc["idempotency"] == [["token:1", "k-1", 200]]
    assert doc["tenants"] == [["run-upgrade", "acme"]]
    assert set(doc["console_types"]) <= {"userpreference", "decisionformuse"}  # nothing is left behind on the old label (the time zone preference and the decision forms' one-time tokens are new there)
    assert doc["moved_types"] == ["access.access", "access.apitoken", "api.idempotencyrecord", "runs.runtenant"]


def test_an_upgrade_from_the_previous_layout_keeps_roles_tokens_and_rows_on_sqlite(tmp_path):
    _assert_upgraded(_upgrade(f"sqlite:///{tmp_path / 'upgrade.sqlite3'}"))


@contextmanager
def _scratch_postgres():
    """The URL of a new, empty PostgreSQL database on the test server, dropped afterwards."""
    s = connection.settings_dict
    name = f"reckon_upgrade_{uuid.uuid4().hex[:10]}"
    admin = f"host={s['HOST'] or '127.0.0.1'} port={s['PORT'] or 5432} user={s['USER'] or 'postgres'} dbname=postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgres://{s['USER'] or 'postgres'}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{name}"
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.postgres
def test_an_upgrade_from_the_previous_layout_keeps_roles_tokens_and_rows_on_postgresql():
    with _scratch_postgres() as url:
        _assert_upgraded(_upgrade(url))


# Calls in flight held in the table of recovery 0004-0007 move onto their runs' rows (recovery 0008),
# where the view of the same name reads them back; going back restores the table.
IN_FLIGHT_FILL = """
from django.db import connection
with connection.cursor() as cur:
    for run_id in ("run-a", "run-b"):
        cur.execute("INSERT INTO reckon_run (run_id, origin, source_file, created_at, last_seq, lease_epoch, lease_holder) VALUES (%s, 'live', '', CURRENT_TIMESTAMP, 9, 2, 'agent')", [run_id])
    for row in [("run-a", 3, 101, "c1", "k1", "post_note", "acme", 1), ("run-a", 5, 102, "c2", "k2", "post_correction", "default", 2),
                ("run-a", 7, 103, "c1", "k3", "post_note", "acme", 2), ("run-b", 2, 104, "c1", "k4", "issue_refund", "t3", 2)]:
        cur.execute("INSERT INTO reckon_in_flight_call (run_id, start_seq, id, call_id, idempotency_key, tool, tenant, started_at, start_epoch) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s, '2026-11-30 10:00:00.250000+00:00', %s)", row)
print("filled")
"""

IN_FLIGHT_CHECK = """
import json
from django.db import connection
from recovery.models import InFlightCall
rows = [[r.run_id, r.start_seq, r.id, r.call_id, r.idempotency_key, r.tool, r.tenant, r.started_at.isoformat(), r.start_epoch] for r in InFlightCall.objects.order_by("run_id", "start_seq")]
with connection.cursor() as cur:
    cur.execute("SELECT run_id, in_flight FROM reckon_run ORDER BY run_id")
    keys = {run_id: sorted(json.loads(v) if isinstance(v, str) else v) if v is not None else None for run_id, v in cur.fetchall()}
print(json.dumps({"rows": rows, "keys": keys}))
"""

IN_FLIGHT_ROWS = [
    ["run-a", 3, 101, "c1", "k1", "post_note", "acme", "2026-11-30T10:00:00.250000+00:00", 1],
    ["run-a", 5, 102, "c2", "k2", "post_correction", "default", "2026-11-30T10:00:00.250000+00:00", 2],
    ["run-a", 7, 103, "c1", "k3", "post_note", "acme", "2026-11-30T10:00:00.250000+00:00", 2],
    ["run-b", 2, 104, "c1", "k4", "issue_refund", "t3", "2026-11-30T10:00:00.250000+00:00", 2],
]


def _in_flight_moves(database_url: str) -> None:
    forward = _manage_steps(database_url, ("recovery", "0007"), ("runs", "0009"), IN_FLIGHT_FILL, (), IN_FLIGHT_CHECK)
    assert "filled" in forward
    doc = json.loads(forward.strip().splitlines()[-1])
    assert doc["rows"] == IN_FLIGHT_ROWS
    # Under its call id; a later start of the same call id in flight under "call id#seq".
    assert doc["keys"] == {"run-a": ["c1", "c1#7", "c2"], "run-b": ["c1"]}
    back_check = IN_FLIGHT_CHECK.replace("in_flight FROM reckon_run", "NULL FROM reckon_run")
    back = json.loads(_manage_steps(database_url, ("recovery", "0007"), back_check).strip().splitlines()[-1])
    assert back["rows"] == IN_FLIGHT_ROWS


def test_calls_in_flight_move_onto_their_runs_rows_and_back_on_sqlite(tmp_path):
    _in_flight_moves(f"sqlite:///{tmp_path / 'in_flight.sqlite3'}")


@pytest.mark.postgres
def test_calls_in_flight_move_onto_their_runs_rows_and_back_on_postgresql():
    with _scratch_postgres() as url:
        _in_flight_moves(url)
