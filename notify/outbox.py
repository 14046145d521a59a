"""The outbox: notification rows written in the same transaction as the event that causes them.

``outbox_project`` is a projector of the append path (registered in ``NotifyConfig.ready`` for the
types in ``NOTIFY_TYPES`` only), so an escalation and the rows that announce it commit together or
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

from celery import current_app
from django.conf import settings
from django.db import transaction
from django.db.models import OuterRef, Subquery
from django.utils import timezone as djtz

from notify.models import Channel, Notification, Route
from recovery.masking import run_sensitive_values, sensitive_fields, value_mask
from recovery.models import UncertainCall
from recovery.projection import RELEVANT as PROJECTED_TYPES
from runs.events import CURRENT_SCHEMA_VERSION
from runs.fold import format_ts
from runs.store import Rider

NOTIFY_TYPES = frozenset({"approval_requested", "operator_note", "tool_call_resolved"})
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
        return all(allowed is None or value in allowed for allowed, value in ((self.risk_class, call.risk_class), (self.tool, call.tool), (self.tenant, call.tenant)))


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
    """The message about ``call``: what CONTRACTS' webhook body carries, masked for everyone.

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


# An escalation's level-1 rows as SQL riding in the append's statement (``runs.store.Rider``): the
# call's row as it was before the append, its current episode, and the first route it matches,
# chosen by the CASE built from the loaded routes (``_route_case``). The statement sees the call as
# the projection found it, before the projection's own update for this event; what the outbox reads
# of the row afterwards is stated here exactly: the projection marks that very row escalated (so it
# is never resolved here), and its reason is the one ``recovery.projection`` keeps (see ``reason``).
_ESCALATION_RIDER = """
INSERT INTO reckon_notify_notification
       (delivery_id, logical_key, type, action, channel, kind, call_pk, run_id, tenant, event_seq,
        episode_seq, episode_at, level, repeat, extra, cause_at, state, attempts, last_error)
SELECT 'msg_' || replace(gen_random_uuid()::text, '-', ''), %b || ch.name,
       CASE WHEN c.reason = 'overdue' THEN 'call.overdue' ELSE 'call.escalated' END, 'trigger', ch.name, ch.kind,
       c.id, c.run_id, c.tenant, %b::bigint, COALESCE(c.ep_seq, %b::bigint), COALESCE(c.ep_at, %b), 0, 0,
       jsonb_build_object('level', 1, 'reason', c.reason), %b, 'pending', 0, ''
  FROM (SELECT u.id, u.run_id, u.tenant, ep.episode_seq AS ep_seq, ep.episode_at AS ep_at,
               {reason} AS reason, {route} AS route
          FROM reckon_uncertain_call u
          LEFT JOIN LATERAL (SELECT n.episode_seq, n.episode_at FROM reckon_notify_notification n
                              WHERE n.call_pk = u.id AND n.action = 'trigger' AND n.episode_seq IS NOT NULL
                              ORDER BY n.episode_seq DESC LIMIT 1) ep ON true
         WHERE u.run_id = %b AND u.start_seq = %b AND EXISTS (SELECT 1 FROM ev)) c
  JOIN unnest(%b::int[], %b::text[], %b::text[]) AS ch(route, name, kind) ON ch.route = c.route
RETURNING id
"""
_RIDER_RESULT = "json_build_object('found', EXISTS (SELECT 1 FROM reckon_uncertain_call WHERE run_id = %b AND start_seq = %b), 'ids', ARRAY(SELECT id FROM {cte}))"


def _route_case(routes: list[RouteSpec]) -> tuple[str, list]:
    """``route_for`` as SQL over the call's row ``u``: the position in ``routes`` of the first route
    with levels that the call matches, or NULL."""
    whens, params = [], []
    for i, route in enumerate(routes):
        if not route.levels:
            continue
        terms = []
        for allowed, column in ((route.risk_class, "risk_class"), (route.tool, "tool"), (route.tenant, "tenant")):
            if allowed is not None:
                # ``value in allowed``: only a string can equal a column's text.
                terms.append(f"u.{column} = ANY(%b::text[])")
                params.append([a for a in allowed if isinstance(a, str)])
        whens.append(f"WHEN {' AND '.join(terms) or 'true'} THEN {i}")
    return ("CASE " + " ".join(whens) + " END") if whens else "NULL::int", params


def outbox_rider(run_id: str, events: list) -> Rider | None:
    """``outbox_project`` for an append whose one notifying event is an escalation of a call named
    by its start, as SQL in the append's statement: its rows are written with no round trip of
    their own. None for anything else (the Python projector does it).

    Exact only where the statement's view of the call (before the append) tells what the projector
    would read after it: no later event of the append touches the call's row (the projection would
    move it on), and the escalation is the append's only event that notifies. When the call has no
    full row yet (it was in flight until this append moved it there), the projector runs in Python
    after all, in its turn."""
    notifying = [i for i, e in enumerate(events) if e.type in NOTIFY_TYPES]
    if len(notifying) != 1:
        return None
    event = events[notifying[0]]
    if event.type != "approval_requested" or event.v != CURRENT_SCHEMA_VERSION:
        return None
    if any(e.type in PROJECTED_TYPES for e in events[notifying[0] + 1 :]):
        return None
    p = event.payload
    start_seq = p.get("start_seq")
    if not p.get("idempotency_key") or type(start_seq) is not int:
        return None
    at = _aware(event.ts)
    if at < djtz.now() - timedelta(seconds=settings.RECKON_NOTIFY_MAX_EVENT_AGE_S):
        return None
    routes, kinds = routes_load()
    if not routes:
        return None
    route_sql, route_params = _route_case(routes)
    # The reason the Python path reads: the event's own, else the one the projection leaves on the
    # row: "policy", unless this is a re-escalation of a call that already had a reason.
    if p.get("reason"):
        reason_sql, reason_params = "%b::text", [str(p["reason"])]
    elif p.get("re_escalation"):
        reason_sql, reason_params = "CASE WHEN COALESCE(u.escalation_reason, '') = '' THEN 'policy' ELSE u.escalation_reason END", []
    else:
        reason_sql, reason_params = "'policy'", []
    channels = [(i, ch, kinds.get(ch, "")) for i, r in enumerate(routes) if r.levels for ch in r.levels[0]["notify"]]
    # Parameters in the order their marks appear in the text.
    params = [f"ev:{run_id}:{event.seq}:", event.seq, event.seq, at, at, *reason_params, *route_params, run_id, start_seq]
    params += [[c[0] for c in channels], [c[1] for c in channels], [c[2] for c in channels]]

    def then(value) -> None:
        if not value["found"]:
            outbox_project(run_id, events, 0)
            return
        ids = value["ids"]
        if ids and settings.RECKON_NOTIFY_DELIVER_ON_COMMIT:
            transaction.on_commit(lambda: notifications_enqueue(ids=ids), robust=True)

    return Rider(
        cte=_ESCALATION_RIDER.format(reason=reason_sql, route=route_sql),
        cte_params=tuple(params),
        result=_RIDER_RESULT,
        result_params=(run_id, start_seq),
        then=then,
    )


def outbox_project(run_id: str, events: list, epoch: int) -> None:
    """Projector: write the notifications ``events`` cause, in the append's transaction."""
    oldest = djtz.now() - timedelta(seconds=settings.RECKON_NOTIFY_MAX_EVENT_AGE_S)
    live = [e for e in events if e.type in NOTIFY_TYPES and _aware(e.ts) >= oldest]
    if not live:
        return
    routes, kinds = routes_load()
    if not routes:
        return
    rows: list[Notification] = []
    for ev in live:
        p = ev.payload
        if ev.type == "approval_requested" and not p.get("idempotency_key"):
            continue  # the agent's own question before a call, not an uncertain call
        call = _call_of(run_id, p)
        if call is None:
            continue
        at = _aware(ev.ts)
        key = f"ev:{run_id}:{ev.seq}"
        if ev.type == "approval_requested":
            route = route_for(call, routes)
            if route is None or call.state == UncertainCall.State.RESOLVED:
                continue
            episode = (call.ep_seq, call.ep_at) if call.ep_seq is not None else (ev.seq, at)
            reason = str(p.get("reason") or call.escalation_reason or "")
            type_ = "call.overdue" if reason == "overdue" else "call.escalated"
            rows += level_rows(call, route, 0, type_=type_, key=key, episode_seq=episode[0], episode_at=episode[1], at=at, kinds=kinds, event_seq=ev.seq, extra={"reason": reason})
        elif ev.type == "operator_note":
            action = p.get("action")
            episode = (call.ep_seq, call.ep_at) if call.ep_seq is not None else None
            if episode is None or call.state == UncertainCall.State.RESOLVED:
                continue
            if action in ("claim", "assign"):
                who = str(p.get("assignee") or p.get("by") or "")
                rows += _follow_rows(call, "call.acknowledged", "acknowledge", _triggered(call.pk, episode[0]), key=key, at=at, kinds=kinds, event_seq=ev.seq, extra={"acknowledged_by": who})
            elif action == "release":
                route = route_for(call, routes)
                if route is not None:
                    type_ = "call.overdue" if call.escalation_reason == "overdue" else "call.escalated"
                    rows += level_rows(call, route, 0, type_=type_, key=key, episode_seq=ev.seq, episode_at=at, at=at, kinds=kinds, event_seq=ev.seq, extra={"released_by": str(p.get("by") or "")})
        elif ev.type == "tool_call_resolved":
            by = "a person" if p.get("by") else "a rule"
            rows += _follow_rows(
                call,
                "call.resolved",
                "resolve",
                _triggered(call.pk),
                key=key,
                at=at,
                kinds=kinds,
                event_seq=ev.seq,
                extra={"disposition": str(p.get("disposition") or ""), "resolved_by": str(p.get("by") or by)},
            )
    rows_write(rows, new_causes=True)
