"""Reveals recorded in Django's admin log by the previous release move into the access record.

A database of its own is migrated to the release before the access record, filled as that release
filled it (its console wrote an admin log entry per reveal and per unmasked export), then migrated
to today, in a real ``manage.py`` process (``migrate``'s own command): a SQLite file always, PostgreSQL too when the suite runs
on it. The old rows are gone from the admin log and each is one record with its time, person and run.
"""

from __future__ import annotations

import json
import uuid

import psycopg
import pytest
from django.db import connection

from tests.helpers import _manage_steps

FILL = """
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.models import User
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from runs.models import Run
colin = User.objects.create_user("colin", password="x")
ct = ContentType.objects.get_for_model(Run)
with connection.cursor() as cur:
    cur.execute("INSERT INTO reckon_run_tenant (run_id, tenant) VALUES (%s, %s)", ["run-old", "acme"])
for msg in ["revealed arguments.account of event 4", "revealed every sensitive field in an unmasked csv export (sha256 " + "ab" * 32 + ")"]:
    LogEntry.objects.create(user=colin, content_type=ct, object_id="run-old", object_repr="run-old", action_flag=CHANGE, change_message=msg)
LogEntry.objects.create(user=colin, content_type=ct, object_id="run-old", object_repr="run-old", action_flag=CHANGE, change_message="changed lease")
print("filled", LogEntry.objects.count())
"""

CHECK = """
import json
from django.contrib.admin.models import LogEntry
from access.models import AccessRecord
print(json.dumps({
    "log": list(LogEntry.objects.values_list("change_message", flat=True)),
    "records": [[r.actor_kind, r.actor_name, r.front_end, r.run_id, r.seq, r.fields, r.all_fields, r.why, r.tenant]
                for r in AccessRecord.objects.order_by("id")],
}))
"""


def _moved(database_url: str) -> dict:
    before = (("admin", "0003_logentry_add_action_flag_choices"), ("runs", "0007_drop_replay_metric"), ("access", "0003_run_writer"))
    out = _manage_steps(database_url, *before, FILL, (), CHECK)
    assert "filled 3" in out
    return json.loads(out.strip().splitlines()[-1])


def _assert_moved(doc: dict) -> None:
    assert doc["log"] == ["changed lease"]  # only reveals move; other admin history stays
    assert doc["records"] == [
        ["user", "colin", "console", "run-old", 4, ["arguments.account"], False, "(recorded before reasons were asked for)", "acme"],
        ["user", "colin", "export", "run-old", None, [], True, "GET /runs/run-old/export.csv (sha256 " + "ab" * 32 + ")", "acme"],
    ]


def test_reveals_in_the_admin_log_move_into_the_access_record_on_sqlite(tmp_path):
    _assert_moved(_moved(f"sqlite:///{tmp_path / 'moved.sqlite3'}"))


@pytest.mark.postgres
def test_reveals_in_the_admin_log_move_into_the_access_record_on_postgresql():
    s = connection.settings_dict
    name = f"reckon_moved_{uuid.uuid4().hex[:10]}"
    admin = f"host={s['HOST'] or '127.0.0.1'} port={s['PORT'] or 5432} user={s['USER'] or 'postgres'} dbname=postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        _assert_moved(_moved(f"postgres://{s['USER'] or 'postgres'}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{name}"))
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
