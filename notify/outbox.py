"""The outbox: notification rows written in the same transaction as the event that causes them.

``outbox_project`` is a read-model rule of the append path (``RULE``, added in ``NotifyConfig.ready``
and applied after the uncertain-call projection, ``runs.rules.ORDER``), its handlers a table keyed
by event type (``OUTBOX_RULES``), so an escalation and the rows that announce it commit together or
not at all: a worker that dies after the commit finds the rows and delivers them; an append that
rolls back leaves none. Delivery starts once the transaction commits (``transaction.on_commit``);
beat's sweep finds anything whose enqueue was lost.

What causes what (one row per channel):

- ``approval_requested`` about an uncertain call: ``call.escalated`` (``call.overdue`` when the
  reason is overdue) to the first level of the route the call matches. The first escalation starts
  an episode; the later levels count their delays from it (``notify.escalation``).
- ``operator_note`` claim or assign: ``call.acknowledged`` to every channel the episode triggered.
  Release: a new episode, level 1 again (nobody is on the call any more).
- ``tool_call_resolved``: ``call.resolved`` to every channel ever triggered for the call.

Only events appended live notify: an event older than ``RECKON_NOTIFY_MAX_EVENT_AGE_S`` (an
imported history) writes nothing, and rebuilding the projections never calls projectors at all.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

from celery import current_app
from django.conf import settings
from django.db import transaction
from django.db.models import OuterRef, Subquery
from django.utils import timezone as djtz

from notify.models import Channel, Notification, Route
from recovery.masking import run_sensitive_values, sensitive_fields, value_mask
from recovery.models import UncertainCall
from recovery.projection import RELEVANT as PROJECTED_TYPES
from runs.events import CURRENT_SCHEMA_VERSION, EventType, rule_table
from runs.fold import format_ts
from runs.rules import ReadModelRule, Sql, rows_select
from runs.store import Rider

TRIGGER_TYPES = ("call.escalated", "call.overdue")


@dataclass(frozen=True)
class RouteSpec:
    position: int
    risk_class: tuple[str, ...] | None
    tool: tuple[str, ...] | None
    tenant: tuple[str, ...] | None
    levels: tuple[dict, ...]
    repeat_s: int | None
    digest: dict | None

    def matches(self, call: UncertainCall) -> bool:
        return all(getattr(self, column) is None or getattr(call, column) in getattr(self, column) for column in ROUTE_MATCHED)


# The call's columns a route may restrict, each to a list of values: ``RouteSpec.matches``, and the
# same test as SQL in the escalation's rider (``_route_case``).
ROUTE_MATCHED = ("risk_class", "tool", "tenant")


_CACHE: dict[str, tuple[float, list, dict]] = {}


def routes_forget() -> None:
    _CACHE.clear()


def routes_load() -> tuple[list[RouteSpec], dict[str, str]]:
    """The routes in order, and each channel's kind by name. Kept in this process for
    ``RECKON_NOTIFY_ROUTES_CACHE_S`` seconds: escalations append often in an incident, and reading
    the configuration each time would be most of the outbox's cost on the append. A change loaded
    elsewhere applies within that time; one loaded by this process applies at once."""
    hit = _CACHE.get("routes")
    now = time.monotonic()
    if hit is not None and now - hit[0] < settings.RECKON_NOTIFY_ROUTES_CACHE_S:
        return hit[1], hit[2]
    routes, kinds = _routes_read()
    _CACHE["routes"] = (now, routes, kinds)
    return routes, kinds


def _routes_read() -> tuple[list[RouteSpec], dict[str, str]]:
    routes = [
        RouteSpec(
            r.position,
            tuple(r.risk_class) if r.risk_class is not None else None,
            tuple(r.tool) if r.tool is not None else None,
            tuple(r.tenant) if r.tenant is not None else None,
            tuple(r.levels or ()),
            r.repeat_s,
            r.digest,
        )
        for r in Route.objects.all()
    ]
    kinds = dict(Channel.objects.values_list("name", "kind")) if routes else {}
    return routes, kinds


def route_for(call: UncertainCall, routes: list[RouteSpec]) -> RouteSpec | None:
    """The first route with levels that the call matches (the file's order)."""
    return next((r for r in routes if r.levels and r.matches(call)), None)


def call_url(pk: int) -> str:
    return f"{settings.RECKON_PUBLIC_URL.rstrip('/')}/calls/{pk}/"


def _aware(ts) -> datetime:
    if isinstance(ts, str):
        ts = datetime.fromisoformat(ts)
    if ts is None:
        return djtz.now()
    return ts if ts.tzinfo else ts.replace(tzinfo=UTC)


def call_body(call: UncertainCall, type_: str, *, at: datetime, extra: dict | None = None) -> dict:
    """The message about ``call``: what the webhook body carries (docs/notifications.md), masked for everyone.

    Nothing free-form from the call is included (no arguments, no last error, no rule text): the
    fields are ids, closed vocabularies and times. The mask is applied all the same, by key and by
    the run's sensitive values, so a sensitive value used as a call id or a tenant is hidden too.
    """
    data = {
        "run_id": call.run_id,
        "call_id": call.call_id,
        "tool": call.tool,
        "risk_class": call.risk_class,
        "tenant": call.tenant,
        "idempotency_key": call.idempotency_key,
        "reason": call.escalation_reason or call.uncertain_reason or "",
        "deadline": format_ts(call.deadline) if call.deadline else None,
        "url": call_url(call.pk),
        **(extra or {}),
    }
    fields = sensitive_fields()
    data = value_mask(data, fields, run_sensitive_values(run_ids=[call.run_id], fields=fields))
    return {"type": type_, "timestamp": format_ts(at), "data": data}


def rows_write(rows: list[Notification], *, new_causes: bool = False) -> list[int]:
    """Insert ``rows`` and have them delivered once the surrounding transaction commits; returns
    the ids written. A logical key already written is skipped, unless ``new_causes`` says every
    key names an event just appended (unique in the log), which saves the check on the append."""
    if not rows:
        return []
    if new_causes:
        ids = [r.pk for r in Notification.objects.bulk_create(rows)]
    else:
        existing = set(Notification.objects.filter(logical_key__in=[r.logical_key for r in rows]).values_list("logical_key", flat=True))
        fresh = [r for r in rows if r.logical_key not in existing]
        Notification.objects.bulk_create(fresh, ignore_conflicts=True)
        ids = list(Notification.objects.filter(logical_key__in=[r.logical_key for r in fresh], state=Notification.State.PENDING).values_list("id", flat=True))
    if ids and settings.RECKON_NOTIFY_DELIVER_ON_COMMIT:
        transaction.on_commit(lambda: notifications_enqueue(ids=ids), robust=True)
    return ids


def notifications_enqueue(*, ids: list[int]) -> None:
    """Hand each notification to a worker. The task is looked up by name (``notify.tasks`` is
    imported by ``NotifyConfig.ready``) so that the outbox, which the tasks' timers import, does not
    import them back."""
    deliver = current_app.tasks["notify.tasks.notification_deliver"]
    for pk in ids:
        deliver.delay(pk)


def level_rows(
    call: UncertainCall,
    route: RouteSpec,
    level: int,
    *,
    type_: str,
    key: str,
    episode_seq: int,
    episode_at: datetime,
    at: datetime,
    kinds: dict[str, str],
    event_seq: int | None = None,
    repeat: int = 0,
    extra: dict | None = None,
) -> list[Notification]:
    extra = {"level": level + 1, **({"repeat": repeat} if repeat else {}), **(extra or {})}
    return [
        Notification(
            logical_key=f"{key}:{channel}",
            type=type_,
            action="trigger",
            channel=channel,
            kind=kinds.get(channel, ""),
            call_pk=call.pk,
            run_id=call.run_id,
            tenant=call.tenant,
            event_seq=event_seq,
            episode_seq=episode_seq,
            episode_at=episode_at,
            level=level,
            repeat=repeat,
            extra=extra,
            cause_at=at,
        )
        for channel in route.levels[level]["notify"]
    ]


def _follow_rows(call: UncertainCall, type_: str, action: str, channels: list[str], *, key: str, at: datetime, kinds: dict, event_seq: int, extra: dict) -> list[Notification]:
    return [
        Notification(
            logical_key=f"{key}:{ch}",
            type=type_,
            action=action,
            channel=ch,
            kind=kinds.get(ch, ""),
            call_pk=call.pk,
            run_id=call.run_id,
            tenant=call.tenant,
            event_seq=event_seq,
            extra=extra,
            cause_at=at,
        )
        for ch in channels
    ]


def _triggered(call_pk: int, episode_seq: int | None = None) -> list[str]:
    qs = Notification.objects.filter(call_pk=call_pk, action="trigger")
    if episode_seq is not None:
        qs = qs.filter(episode_seq=episode_seq)
    return sorted(set(qs.values_list("channel", flat=True)))


def _call_of(run_id: str, p: dict) -> UncertainCall | None:
    """The call an event is about, with its current episode (``ep_seq``, ``ep_at``) in one query."""
    if p.get("start_seq") is not None:
        qs = UncertainCall.objects.filter(run_id=run_id, start_seq=p["start_seq"])
    elif p.get("idempotency_key"):
        qs = UncertainCall.objects.filter(run_id=run_id, idempotency_key=p["idempotency_key"]).order_by("-start_seq")
    else:
        return None
    episodes = Notification.objects.filter(call_pk=OuterRef("pk"), action="trigger").exclude(episode_seq=None).order_by("-episode_seq")
    return qs.annotate(ep_seq=Subquery(episodes.values("episode_seq")[:1]), ep_at=Subquery(episodes.values("episode_at")[:1])).first()


def notification_body(n: Notification) -> dict:
    """The message ``n`` sends: kept once rendered; a call's message is rendered from the call as
    it is now, with what the cause recorded (``extra``)."""
    if n.body is not None:
        return n.body
    call = UncertainCall.objects.filter(pk=n.call_pk).first() if n.call_pk else None
    if call is None:
        return {"type": n.type, "timestamp": format_ts(n.cause_at or n.created_at), "data": {"run_id": n.run_id, **n.extra}}
    return call_body(call, n.type, at=n.cause_at or n.created_at, extra=n.extra)


@dataclass(frozen=True)
class _Cause:
    """What every handler of the outbox's rule table is given besides the event."""

    run_id: str
    key: str
    at: datetime
    routes: list[RouteSpec]
    kinds: dict[str, str]


def _escalated(ev, cx: _Cause) -> list[Notification]:
    """An escalation of an uncertain call: the first level of the route it matches."""
    p = ev.payload
    if not p.get("idempotency_key"):
        return []  # the agent's own question before a call, not an uncertain call
    call = _call_of(cx.run_id, p)
    route = route_for(call, cx.routes) if call is not None else None
    if route is None or call.state == UncertainCall.State.RESOLVED:
        return []
    episode = (call.ep_seq, call.ep_at) if call.ep_seq is not None else (ev.seq, cx.at)
    reason = str(p.get("reason") or call.escalation_reason or "")
    type_ = "call.overdue" if reason == "overdue" else "call.escalated"
    return level_rows(call, route, 0, type_=type_, key=cx.key, episode_seq=episode[0], episode_at=episode[1], at=cx.at, kinds=cx.kinds, event_seq=ev.seq, extra={"reason": reason})


def _noted(ev, cx: _Cause) -> list[Notification]:
    """A claim or assignment acknowledges the episode; a release starts a new one at level 1."""
    p = ev.payload
    call = _call_of(cx.run_id, p)
    if call is None or call.ep_seq is None or call.state == UncertainCall.State.RESOLVED:
        return []
    action = p.get("action")
    if action in ("claim", "assign"):
        who = str(p.get("assignee") or p.get("by") or "")
        return _follow_rows(call, "call.acknowledged", "acknowledge", _triggered(call.pk, call.ep_seq), key=cx.key, at=cx.at, kinds=cx.kinds, event_seq=ev.seq, extra={"acknowledged_by": who})
    route = route_for(call, cx.routes) if action == "release" else None
    if route is None:
        return []
    type_ = "call.overdue" if call.escalation_reason == "overdue" else "call.escalated"
    return level_rows(call, route, 0, type_=type_, key=cx.key, episode_seq=ev.seq, episode_at=cx.at, at=cx.at, kinds=cx.kinds, event_seq=ev.seq, extra={"released_by": str(p.get("by") or "")})


def _resolved(ev, cx: _Cause) -> list[Notification]:
    """A resolution: ``call.resolved`` to every channel ever triggered for the call."""
    p = ev.payload
    call = _call_of(cx.run_id, p)
    if call is None:
        return []
    extra = {"disposition": str(p.get("disposition") or ""), "resolved_by": str(p.get("by") or ("a person" if p.get("by") else "a rule"))}
    return _follow_rows(call, "call.resolved", "resolve", _triggered(call.pk), key=cx.key, at=cx.at, kinds=cx.kinds, event_seq=ev.seq, extra=extra)


# The rule, keyed by event type: what each type causes (the module's docstring says it in prose).
OUTBOX_RULES = rule_table(
    "notification outbox",
    {EventType.APPROVAL_REQUESTED: _escalated, EventType.OPERATOR_NOTE: _noted, EventType.TOOL_CALL_RESOLVED: _resolved},
    ignored=[t for t in EventType if t not in (EventType.APPROVAL_REQUESTED, EventType.OPERATOR_NOTE, EventType.TOOL_CALL_RESOLVED)],
)
NOTIFY_TYPES = frozenset(OUTBOX_RULES)


def outbox_project(run_id: str, events: list, epoch: int) -> None:
    """The rule applied in the append's transaction: write the notifications ``events`` cause."""
    oldest = djtz.now() - timedelta(seconds=settings.RECKON_NOTIFY_MAX_EVENT_AGE_S)
    live = [e for e in events if e.type in OUTBOX_RULES and _aware(e.ts) >= oldest]
    if not live:
        return
    routes, kinds = routes_load()
    if not routes:
        return
    rows: list[Notification] = []
    for ev in live:
        rows += OUTBOX_RULES[ev.type](ev, _Cause(run_id, f"ev:{run_id}:{ev.seq}", _aware(ev.ts), routes, kinds))
    rows_write(rows, new_causes=True)


def _route_case(routes: list[RouteSpec]) -> tuple[str, list]:
    """``route_for`` as SQL over the call's row ``u``: the position in ``routes`` of the first route
    with levels that the call matches (``ROUTE_MATCHED``), or NULL."""
    whens, params = [], []
    for i, route in enumerate(routes):
        if route.levels:
            terms = [f"u.{column} = ANY(%b::text[])" for column in ROUTE_MATCHED if getattr(route, column) is not None]
            # ``value in allowed``: only a string can equal a column's text.
            params += [[a for a in getattr(route, column) if isinstance(a, str)] for column in ROUTE_MATCHED if getattr(route, column) is not None]
            whens.append(f"WHEN {' AND '.join(terms) or 'true'} THEN {i}")
    return ("CASE " + " ".join(whens) + " END") if whens else "NULL::int", params


# The call an escalation names as the rider's statement sees it (before the append) with its
# current episode (``_call_of``'s), and the route it matches (``_route_case``).
_RIDER_CALL = """c AS (SELECT u.id, u.run_id, u.tenant, ep.episode_seq AS ep_seq, ep.episode_at AS ep_at, {route} AS route
          FROM reckon_uncertain_call u
          LEFT JOIN LATERAL (SELECT n.episode_seq, n.episode_at FROM reckon_notify_notification n
                              WHERE n.call_pk = u.id AND n.action = 'trigger' AND n.episode_seq IS NOT NULL
                              ORDER BY n.episode_seq DESC LIMIT 1) ep ON true
         WHERE u.run_id = %b AND u.start_seq = %b AND EXISTS (SELECT 1 FROM ev))"""
_RIDER_RESULT = "json_build_object('found', EXISTS (SELECT 1 FROM reckon_uncertain_call WHERE run_id = %b AND start_seq = %b), 'ids', ARRAY(SELECT id FROM {cte}))"


def outbox_rider(run_id: str, events: list) -> Rider | None:
    """``_escalated`` for an append whose one notifying event is an escalation of a call named by
    its start, with its reason, as SQL in the append's statement: its rows are written with no
    round trip of their own. The rows are the ones ``_escalated`` builds (``level_rows``), for each
    route the call might match, with the call's values standing in as SQL (``runs.rules.Sql``):
    the statement keeps those of the route it matches. None for anything else (the Python rule).

    Exact only where the statement's view of the call (before the append) tells what the Python
    rule would read after it: no later event of the append touches the call's row, the escalation
    is the append's only notifying event, and it names its reason (else the Python rule reads the
    one the projection leaves on the row). The projection marks that very row escalated, so it is
    never resolved here. When the call has no full row yet (in flight until this append), the
    Python rule runs after all, in its turn."""
    notifying = [i for i, e in enumerate(events) if e.type in OUTBOX_RULES]
    if len(notifying) != 1:
        return None
    event = events[notifying[0]]
    p = event.payload
    if event.type != "approval_requested" or event.v != CURRENT_SCHEMA_VERSION or not p.get("idempotency_key") or not p.get("reason"):
        return None
    if any(e.type in PROJECTED_TYPES for e in events[notifying[0] + 1 :]) or type(p.get("start_seq")) is not int:
        return None
    at = _aware(event.ts)
    if at < djtz.now() - timedelta(seconds=settings.RECKON_NOTIFY_MAX_EVENT_AGE_S):
        return None
    routes, kinds = routes_load()
    route_sql, params = _route_case(routes)
    reason = str(p["reason"])
    call = SimpleNamespace(pk=Sql("c.id"), run_id=Sql("c.run_id"), tenant=Sql("c.tenant"))
    episode = {"episode_seq": Sql("COALESCE(c.ep_seq, %b::bigint)", (event.seq,)), "episode_at": Sql("COALESCE(c.ep_at, %b::timestamptz)", (at,))}
    selects, columns = [], None
    params += [run_id, p["start_seq"]]
    for i, route in enumerate(routes):
        if route.levels:
            rows = level_rows(call, route, 0, type_="call.overdue" if reason == "overdue" else "call.escalated", key=f"ev:{run_id}:{event.seq}", **episode, at=at, kinds=kinds, event_seq=event.seq, extra={"reason": reason})
            if rows:
                columns, texts, row_params = rows_select(rows)
                selects += [f"{text} FROM c WHERE c.route = {i}" for text in texts]
                params += row_params
    if not selects:
        return None

    def then(value) -> None:
        if not value["found"]:
            outbox_project(run_id, events, 0)
        elif value["ids"] and settings.RECKON_NOTIFY_DELIVER_ON_COMMIT:
            transaction.on_commit(lambda: notifications_enqueue(ids=value["ids"]), robust=True)

    cte = f"INSERT INTO reckon_notify_notification ({', '.join(columns)}) WITH {_RIDER_CALL.format(route=route_sql)} {' UNION ALL '.join(selects)} RETURNING id"
    return Rider(cte=cte, cte_params=tuple(params), result=_RIDER_RESULT, result_params=(run_id, p["start_seq"]), then=then)


# Applied after the uncertain-call projection (runs.rules.ORDER): it reads the call's row as this
# append has left it. Only the types that can cause a notification are named: the agent's hot start
# and completion never run it, and keep their one-statement append.
RULE = ReadModelRule("notification outbox", NOTIFY_TYPES, outbox_project, rider=outbox_rider)
