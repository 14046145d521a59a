"""The query plans behind the queue table: which index each screen's and endpoint's query uses.

``queue_plans`` requests each URL once, keeps every SQL statement that reads
``reckon_uncertain_call``, and asks PostgreSQL for its plan with ``EXPLAIN (ANALYZE, FORMAT JSON)``
(each statement several times; the median execution time is reported). What it prints is what
docs/recovery.md "The queue table's indexes" shows, and how the indexes there were chosen: an
index that no plan here (nor the worker's own reads) uses costs every write and helps nothing.
"""

from __future__ import annotations

import re
import statistics

from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

TABLE = "reckon_uncertain_call"


def _nodes(node: dict):
    yield node
    for child in node.get("Plans", ()):
        yield from _nodes(child)


def _line(node: dict) -> str:
    """The plan node that reads the table, in EXPLAIN's text words."""
    kind = node["Node Type"]
    if node.get("Index Name"):
        return f"{kind} using {node['Index Name']}" + (f" on {node['Relation Name']}" if node.get("Relation Name") else "")
    return f"{kind} on {node['Relation Name']}"


def table_indexes(*, constraints: bool = True) -> list[str]:
    """The queue table's indexes; without ``constraints``, those that enforce no constraint."""
    with connection.cursor() as c:
        c.execute(
            "SELECT i.indexname FROM pg_indexes i WHERE i.tablename = %s" + ("" if constraints else " AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conname = i.indexname)") + " ORDER BY 1",
            [TABLE],
        )
        return [r[0] for r in c.fetchall()]


def statement_plan(sql: str, *, repeats: int = 5) -> dict:
    """Indexes used on the queue table, the plan lines that read it, and the median execution time."""
    times, plan = [], None
    with connection.cursor() as c:
        for _ in range(repeats):
            c.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql)
            doc = c.fetchone()[0]
            plan = doc[0] if isinstance(doc, list) else doc
            times.append(plan["Execution Time"])
    mine = set(table_indexes())
    # A bitmap index scan names its index but not the table: the index name says whose it is.
    reads = [n for n in _nodes(plan["Plan"]) if n.get("Relation Name") == TABLE or n.get("Index Name") in mine]
    return {
        "indexes": sorted({n["Index Name"] for n in reads if n.get("Index Name") in mine}),
        "lines": [_line(n) for n in reads],
        "ms": round(statistics.median(times), 2),
    }


def queue_plans(client: Client, urls: list[tuple[str, str]], *, headers: dict | None = None) -> list[dict]:
    """For each (label, url): every statement of that request that reads the queue table, planned."""
    out = []
    for label, url in urls:
        with CaptureQueriesContext(connection) as ctx:
            resp = client.get(url, **(headers or {}))
        if resp.status_code != 200:
            raise RuntimeError(f"GET {url} answered {resp.status_code}")
        for q in ctx.captured_queries:
            if _reads_table(q["sql"]):
                out.append({"request": label, "sql": q["sql"], **statement_plan(q["sql"])})
    return out


def statements_plans(label: str, fn) -> list[dict]:
    """Plans of the statements ``fn()`` sends that read the queue table (the worker's own reads),
    one for each statement shape: detection sends the same statement once per run, with only its
    literals changed, and one plan of it says what the others would."""
    with CaptureQueriesContext(connection) as ctx:
        fn()
    shapes: set[str] = set()
    out = []
    for q in ctx.captured_queries:
        shape = _LITERALS.sub("?", q["sql"])
        if _reads_table(q["sql"]) and shape not in shapes:
            shapes.add(shape)
            out.append({"request": label, "sql": q["sql"], **statement_plan(q["sql"])})
    return out


# A statement's string and number literals, which set its shape apart from its values.
_LITERALS = re.compile(r"'(?:[^']|'')*'|\b\d+(?:\.\d+)?\b")


def statement_sql_plan(label: str, sql: str, params: list) -> list[dict]:
    """The plan of one hand-written statement (sent prepared, so not seen by Django's capture)."""
    text = connection.ops.compose_sql(sql, params)
    return [{"request": label, "sql": text, **statement_plan(text)}]


def _reads_table(sql: str) -> bool:
    return TABLE in sql and sql.lstrip("( \n").upper().startswith("SELECT")


def indexes_unused(plans: list[dict]) -> list[str]:
    """The queue table's indexes that none of ``plans`` uses (constraints' own indexes excluded:
    they are kept for what they enforce, not for reads)."""
    used = {i for p in plans for i in p["indexes"]}
    return [i for i in table_indexes(constraints=False) if i not in used]
