# Indexes for the console's search (console/search.py) and its decision log, on PostgreSQL only:
# btree indexes of UPPER(id) for ids found by their start, and pg_trgm GIN indexes of UPPER(text),
# which serve "contains, ignoring case" for argument values and evidence references without reading
# the table. The expressions are the ones console/search.py writes; a different
# spelling would not be matched by the planner. SQLite has no trigram index and scans (the console
# search there serves small installations), so on it this migration adds only the plain btree indexes (BOTH).
#
# The narrow in-flight table gets none: it is written by every tool call of every agent and holds
# only the calls in flight, so a scan of it is cheap and an index would cost the agents' hot path.
# The event table gets partial indexes only (the decisions, a small part of it), so an ordinary
# append pays nothing but the check of the index's condition.

from django.db import migrations

INDEXES = [
    # Identifiers are found by their start (the whole id, or the first characters of a key): a
    # btree range that stops after a page however many ids share the start, which a trigram
    # index cannot (it builds its whole bitmap first: 100,000 keys ending in "-450" cost 120 ms).
    ("reckon_run_search_id", "reckon_run", "btree (UPPER(run_id) text_pattern_ops)", ""),
    ("reckon_uc_search_call_id", "reckon_uncertain_call", "btree (UPPER(call_id) text_pattern_ops)", ""),
    ("reckon_uc_search_key", "reckon_uncertain_call", "btree (UPPER(idempotency_key) text_pattern_ops)", ""),
    ("reckon_uc_search_run", "reckon_uncertain_call", "btree (UPPER(run_id) text_pattern_ops)", ""),
    ("reckon_uc_search_args", "reckon_uncertain_call", "gin (UPPER((arguments)::text) gin_trgm_ops)", ""),
    ("reckon_event_search_evidence", "reckon_event", "gin (UPPER(payload ->> 'evidence_ref') gin_trgm_ops)", "type = 'approval_decided'"),
]
# Plain SQL both engines take.
BOTH = [
    # The decision log, newest first by the decision's own time.
    ("reckon_event_decisions_ts", "reckon_event", "(ts DESC, run_id DESC, seq DESC)", "type IN ('approval_decided', 'tool_call_resolved')"),
    # The queue filtered by "resolved" or "all": its pages in (started_at, id) order over every
    # state, a range that stops after a page (it was a scan and sort of the whole history).
    ("reckon_uc_age_all", "reckon_uncertain_call", "(started_at, id)", ""),
    # "Mine": the calls a person holds, few among many.
    ("reckon_uc_open_claimed", "reckon_uncertain_call", "(claimed_by_name, started_at, id)", "state IN ('open', 'reconciling', 'escalated') AND claimed_by_name <> ''"),
]


def _create(apps, schema_editor):
    for name, table, body, where in BOTH:
        schema_editor.execute(f'CREATE INDEX IF NOT EXISTS "{name}" ON "{table}" {body}{" WHERE " + where if where else ""}')
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    for name, table, body, where in INDEXES:
        schema_editor.execute(f'CREATE INDEX IF NOT EXISTS "{name}" ON "{table}" USING {body}{" WHERE " + where if where else ""}'.replace("USING (", "("))


def _drop(apps, schema_editor):
    for name, *_ in INDEXES + BOTH:
        schema_editor.execute(f'DROP INDEX IF EXISTS "{name}"')


class Migration(migrations.Migration):
    dependencies = [
        ("console", "0003_models_moved"),
        ("runs", "0008_chain"),
        ("recovery", "0005_drop_unused_queue_indexes"),
    ]

    operations = [migrations.RunPython(_create, _drop)]
