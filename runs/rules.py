"""The read-model rules: what every append keeps beside the log, each rule defined once, in one order.

A read model is one ``ReadModelRule``: the event types it reads (the keys of its handler table,
``runs.events.rule_table``, which every registered type must be decided in), and ``apply``, the
Python that runs the table over an append's events inside the append's transaction. That table is
the rule's one definition. A rule may add a database form for speed (PostgreSQL): ``statement``
(a ``runs.store.StatementPart`` for the agent's single hot appends) or ``rider`` (a
``runs.store.Rider`` riding in an append that is a transaction anyway). A database form is
generated from the same definition, never written beside it: from the rows or columns ``apply``'s
own handlers produce (the run-tenant model, the uncertain-call projection's rider), or from the
entry the rule's own writer would keep (the projection's calls in flight). Where it cannot know that
the Python rule would do exactly what it does, it writes nothing and the Python rule runs.

The rules run in the order of ``ORDER``, never in the order apps happen to load: a rule may read
what the rules before it have just written (the outbox reads the uncertain-call rows as the
projection has left them). An app adds its rules in its ``ready`` (``rule_add``); a rule is handed to
the store (``runs.store.projector_register``) only once every rule before it whose app is installed
has been added, so the store's order is this table's whatever ``INSTALLED_APPS`` says.
"""

from __future__ import annotations

from dataclasses import dataclass
from django.apps import apps
from django.core.exceptions import ImproperlyConfigured
from django.db import connection

from runs.store import Projector, Rider, RiderForm, StatementForm, StatementPart, projector_register

# (app, rule), in the order an append applies them, and why that order:
ORDER: tuple[tuple[str, str], ...] = (
    # Which tenants a run belongs to (runs.tenants): reads no other read model.
    ("runs", "run tenants"),
    # Calls in doubt (recovery.projection): reads only its own rows.
    ("recovery", "uncertain calls"),
    # One log line per recovery decision, after the commit (recovery.decision_log): reads the log only.
    ("recovery", "decision log"),
    # The notification outbox (notify.outbox): reads the uncertain-call rows as this append left them.
    ("notify", "notification outbox"),
    # The reports' roll-up of recorded calls per run, UTC day, tool and tenant (recovery.recorded):
    # reads the log only.
    ("recovery", "recorded calls"),
)


@dataclass(frozen=True)
class ReadModelRule:
    """One read model: ``apply(run_id, events, epoch)`` for appends carrying one of ``types``."""

    name: str
    types: frozenset[str]
    apply: Projector
    statement: StatementForm | None = None
    rider: RiderForm | None = None


_ADDED: dict[str, ReadModelRule] = {}
_NAMES = {name: app for app, name in ORDER}


def rule_add(rule: ReadModelRule) -> ReadModelRule:
    """Add ``rule`` (named in ``ORDER``) and hand every rule whose turn has come to the store."""
    if rule.name not in _NAMES:
        raise ImproperlyConfigured(f"read-model rule {rule.name!r} is not in runs.rules.ORDER: add it there, in the place its reads need")
    _ADDED[rule.name] = rule
    for app, name in ORDER:
        found = _ADDED.get(name)
        if found is None:
            if apps.is_installed(app):
                return  # its app will add it: the rules after it wait for it
            continue
        projector_register(found.apply, types=found.types, statement=found.statement, rider=found.rider)
    return rule


def rules_added() -> list[ReadModelRule]:
    """The rules added so far, in ``ORDER``."""
    return [_ADDED[name] for _app, name in ORDER if name in _ADDED]


def _columns(model) -> list:
    return [f for f in model._meta.concrete_fields if not f.primary_key]


def rows_insert(model, rows: list[tuple]) -> None:
    """A rule's rows of ``model``, each a tuple of its columns but the key in the model's order,
    inserted unless already present."""
    if rows:
        names = [f.attname for f in _columns(model)]
        model.objects.bulk_create([model(**dict(zip(names, row))) for row in rows], ignore_conflicts=True)


_INSERTS: dict[type, str] = {}


def _insert_into(model) -> tuple[str, str]:
    """The head of a rule's row insert, ``INSERT INTO table (columns)`` (the columns ``rows_insert``
    fills), and one row's parameters, ``%b`` a column."""
    qn, fields = connection.ops.quote_name, _columns(model)
    return f"INSERT INTO {qn(model._meta.db_table)} ({', '.join(qn(f.column) for f in fields)})", ", ".join("%b" for _ in fields)


def rows_insert_statement(model, rows: list[tuple]) -> StatementPart | None:
    """``rows_insert`` as a part of the append's statement, generated from the same rows (the
    model's table and columns, the rows' values as parameters): ``INSERT ... SELECT ... FROM ev ON
    CONFLICT DO NOTHING``, reading ``ev`` (the appended event) so that nothing is written when the
    fence refused. No rows: an empty part. More than one: None, the Python rule (one cte a part)."""
    if not rows:
        return StatementPart()
    if len(rows) > 1:
        return None
    sql = _INSERTS.get(model)
    if sql is None:
        head, row = _insert_into(model)
        sql = _INSERTS[model] = f"{head} SELECT {row} FROM ev ON CONFLICT DO NOTHING"
    return StatementPart(cte=sql, cte_params=rows[0])


def rows_insert_rider(model, rows: list[tuple]) -> Rider | None:
    """``rows_insert`` riding in a batch's statement (PostgreSQL) instead of a statement of its
    own: the same rows, inserted by the statement generated from them (the model's table and
    columns, the rows' values as parameters), only if the fence let the events in (``ev``)."""
    if not rows:
        return None
    head, row = _insert_into(model)
    sql = f"{head} SELECT * FROM (VALUES {', '.join([f'({row})'] * len(rows))}) AS r WHERE EXISTS (SELECT FROM ev) ON CONFLICT DO NOTHING"
    return Rider(cte=sql, cte_params=tuple(v for r in rows for v in r), result="0", result_params=(), then=lambda _: None)


class Sql(str):
    """A value of a rule's row that the database gives when the row is written by a statement: SQL
    text (with its own ``%b`` parameters), standing in for the value in the row the rule builds."""

    params: tuple = ()

    def __new__(cls, text: str, params: tuple = ()):
        sql = super().__new__(cls, text)
        sql.params = params
        return sql


_SELECTED: dict[type, tuple[list[str], list]] = {}


def _selected(model) -> tuple[list[str], list]:
    """The columns ``rows_select`` writes, and each field with its parameter's cast (once per model)."""
    found = _SELECTED.get(model)
    if found is None:
        fields = [f for f in _columns(model) if not f.has_db_default()]
        found = _SELECTED[model] = ([connection.ops.quote_name(f.column) for f in fields], [(f, f"%b::{f.db_type(connection)}") for f in fields])
    return found


def rows_select(rows: list) -> tuple[list[str], list[str], list]:
    """Rows a rule built (instances of one model, some values ``Sql``) as SQL: the columns, one
    ``SELECT`` list per row, and their parameters in order. Every other value is a ``%b`` parameter
    cast to its column's type, as the model's field prepares it for saving; a column with a
    database default is left to it."""
    columns, fields = _selected(type(rows[0]))
    texts, params = [], []
    for row in rows:
        values = []
        for f, cast in fields:
            value = f.pre_save(row, True)
            if isinstance(value, Sql):
                values.append(f"({value})")
                params.extend(value.params)
            else:
                values.append(cast)
                params.append(f.get_db_prep_save(value, connection))
        texts.append("SELECT " + ", ".join(values))
    return columns, texts, params
