# Calls in flight move from their own table (reckon_in_flight_call, one row and one index entry per
# tool call, inserted by the start's append and deleted by its completion's) onto the run's row
# (reckon_run.in_flight), which the append's fence rewrites anyway: the agent's hot path then adds
# no row, no index entry and about half the WAL per append. ``reckon_in_flight_call`` becomes a
# view over that column with the same columns, so every reader (the queue, search, metrics,
# detection, the console) reads what it read before. Existing rows move with their ids.

from django.db import migrations

_PG_VIEW = """
CREATE VIEW reckon_in_flight_call AS
SELECT r.run_id AS run_id,
       (f.value->>'s')::bigint AS start_seq,
       (f.value->>'i')::bigint AS id,
       (f.value->>'c')::varchar(200) AS call_id,
       (f.value->>'k')::varchar(200) AS idempotency_key,
       (f.value->>'t')::varchar(200) AS tool,
       (f.value->>'n')::varchar(200) AS tenant,
       (f.value->>'a')::timestamptz AS started_at,
       (f.value->>'e')::bigint AS start_epoch
  FROM reckon_run r
 CROSS JOIN LATERAL jsonb_each(r.in_flight) f
 WHERE r.in_flight IS NOT NULL
"""

_SQLITE_VIEW = """
CREATE VIEW reckon_in_flight_call AS
SELECT r.run_id AS run_id,
       json_extract(f.value, '$.s') AS start_seq,
       json_extract(f.value, '$.i') AS id,
       json_extract(f.value, '$.c') AS call_id,
       json_extract(f.value, '$.k') AS idempotency_key,
       json_extract(f.value, '$.t') AS tool,
       json_extract(f.value, '$.n') AS tenant,
       json_extract(f.value, '$.a') AS started_at,
       json_extract(f.value, '$.e') AS start_epoch
  FROM reckon_run r, json_each(r.in_flight) f
 WHERE r.in_flight IS NOT NULL
"""

# Each call under its call id, a later start of the same call id in flight under "call id#seq"
# (recovery.projection.in_flight_write).
_PG_MOVE = """
UPDATE reckon_run r
   SET in_flight = m.calls
  FROM (SELECT run_id, jsonb_object_agg(CASE WHEN n = 1 THEN call_id ELSE call_id || '#' || start_seq END, jsonb_build_object(
               's', start_seq, 'i', id, 'c', call_id, 'k', idempotency_key, 't', tool, 'n', tenant, 'a', started_at, 'e', start_epoch)) AS calls
          FROM (SELECT *, row_number() OVER (PARTITION BY run_id, call_id ORDER BY start_seq) AS n FROM reckon_in_flight_call) f
         GROUP BY run_id) m
 WHERE r.run_id = m.run_id
"""

# SQLite keeps Django's text form of the time ('YYYY-MM-DD HH:MM:SS.ffffff'), as the table did.
_SQLITE_MOVE = """
UPDATE reckon_run
   SET in_flight = (SELECT json_group_object(CASE WHEN f.n = 1 THEN f.call_id ELSE f.call_id || '#' || f.start_seq END, json_object(
                           's', f.start_seq, 'i', f.id, 'c', f.call_id, 'k', f.idempotency_key, 't', f.tool, 'n', f.tenant, 'a', f.started_at, 'e', f.start_epoch))
                      FROM (SELECT *, row_number() OVER (PARTITION BY run_id, call_id ORDER BY start_seq) AS n FROM reckon_in_flight_call) f
                     WHERE f.run_id = reckon_run.run_id)
 WHERE run_id IN (SELECT run_id FROM reckon_in_flight_call)
"""

_TABLE = (
    'CREATE TABLE "reckon_in_flight_call" ("run_id" varchar(200) NOT NULL, "start_seq" bigint NOT NULL, "id" bigint NOT NULL, '
    '"call_id" varchar(200) NOT NULL, "idempotency_key" varchar(200) NOT NULL, "tool" varchar(200) NOT NULL, "tenant" varchar(200) NOT NULL, '
    '"started_at" {ts} NOT NULL, "start_epoch" bigint NOT NULL, PRIMARY KEY ("run_id", "start_seq"))'
)


def _forward(apps, schema_editor):
    with schema_editor.connection.cursor() as cur:
        # Every call in flight was written by its run's append, so its run row exists; refuse to
        # lose one if a database says otherwise.
        cur.execute("SELECT f.run_id, f.start_seq FROM reckon_in_flight_call f WHERE NOT EXISTS (SELECT 1 FROM reckon_run r WHERE r.run_id = f.run_id)")
        orphans = cur.fetchall()
        if orphans:
            raise RuntimeError(f"reckon_in_flight_call holds calls of runs that do not exist (run, start seq): {orphans[:10]}; nothing was moved")
        postgres = schema_editor.connection.vendor == "postgresql"
        cur.execute(_PG_MOVE if postgres else _SQLITE_MOVE)
        cur.execute("DROP TABLE reckon_in_flight_call")
        cur.execute(_PG_VIEW if postgres else _SQLITE_VIEW)


def _backward(apps, schema_editor):
    postgres = schema_editor.connection.vendor == "postgresql"
    with schema_editor.connection.cursor() as cur:
        cur.execute("DROP VIEW reckon_in_flight_call")
        cur.execute(_TABLE.format(ts="timestamp with time zone" if postgres else "datetime"))
        if postgres:
            cur.execute(
                "INSERT INTO reckon_in_flight_call SELECT r.run_id, (f.value->>'s')::bigint, (f.value->>'i')::bigint, f.value->>'c', f.value->>'k', "
                "f.value->>'t', f.value->>'n', (f.value->>'a')::timestamptz, (f.value->>'e')::bigint "
                "FROM reckon_run r CROSS JOIN LATERAL jsonb_each(r.in_flight) f WHERE r.in_flight IS NOT NULL"
            )
        else:
            cur.execute(
                "INSERT INTO reckon_in_flight_call SELECT r.run_id, json_extract(f.value, '$.s'), json_extract(f.value, '$.i'), json_extract(f.value, '$.c'), "
                "json_extract(f.value, '$.k'), json_extract(f.value, '$.t'), json_extract(f.value, '$.n'), json_extract(f.value, '$.a'), "
                "json_extract(f.value, '$.e') FROM reckon_run r, json_each(r.in_flight) f WHERE r.in_flight IS NOT NULL"
            )
        cur.execute("UPDATE reckon_run SET in_flight = NULL WHERE in_flight IS NOT NULL")


class Migration(migrations.Migration):
    dependencies = [
        ("recovery", "0007_resolved_at"),
        ("runs", "0010_run_in_flight"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.AlterModelOptions(name="inflightcall", options={"managed": False})],
            database_operations=[migrations.RunPython(_forward, _backward)],
        ),
    ]
