"""The timers: escalation levels, repeats of claimed calls, and the daily digest. Run by beat.

Nothing here keeps state of its own. Each tick derives what is due from the uncertain-call rows
(claimed or not, resolved or not: the log's projection) and the outbox (which levels of which
episode have been written), so a restart or a missed tick loses nothing: the next tick writes what
became due meanwhile. Every row written has a logical key naming its level and episode, so two
ticks racing write it once.

- Level N (N > 1) fires when the episode's start plus its delay has passed and nobody holds the
  call. A claim stops the climb; a release starts a new episode (``notify.outbox``).
- A claimed, unresolved call on a route with ``repeat`` notifies the highest level its episode
  reached again, every ``repeat`` after the claim.
- A resolved call that was paged on a channel with no resolve message sent there gets one. The
  append's projector writes them for a ``tool_call_resolved``; this covers a call the log resolves
  otherwise (the agent's own late completion, which keeps its one-statement append and runs no
  notification projector), and a level written by a tick racing the resolution.
- A digest is written once per route, tenant and local day, at or after the route's time.

Rebuilding the projections gives every uncertain call a new row id, which the outbox's rows name
(``call_pk``). ``calls_relink`` finds the call again from the event that caused the episode (its
``start_seq`` or key, as the projector found it), so the climb, repeats and resolves go on.
"""

from __future__ import annotations

import zoneinfo
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Exists, Max, Min, OuterRef
from django.utils import timezone as djtz

from notify.models import Notification
from notify.outbox import TRIGGER_TYPES, call_url, level_rows, route_for, routes_load, rows_write
from recovery.masking import run_sensitive_values, sensitive_fields, value_mask
from recovery.models import UncertainCall
from runs.fold import format_ts
from runs.store import events_read


def escalations_tick(*, now: datetime | None = None) -> list[int]:
    """Write the level and repeat notifications due at ``now``; returns the ids written."""
    now = now or djtz.now()
    routes, kinds = routes_load()
    if not routes:
        return []
    calls_relink()
    episodes = Notification.objects.filter(action="trigger", type__in=TRIGGER_TYPES, call_pk__isnull=False).values("call_pk").annotate(episode_seq=Max("episode_seq"))
    latest = {e["call_pk"]: e["episode_seq"] for e in episodes}
    calls = UncertainCall.objects.unresolved().filter(pk__in=list(latest))
    written: list[int] = []
    for call in calls:
        route = route_for(call, routes)
        if route is None:
            continue
        ep = latest[call.pk]
        rows = list(Notification.objects.filter(call_pk=call.pk, action="trigger", episode_seq=ep).values("level", "repeat", "episode_at"))
        episode_at = rows[0]["episode_at"]
        fired = {r["level"] for r in rows}
        type_ = "call.overdue" if call.escalation_reason == "overdue" else "call.escalated"
        new: list[Notification] = []
        if call.claimed_at is None:
            for level in range(1, len(route.levels)):
                due = episode_at + timedelta(seconds=route.levels[level]["after_s"])
                if level not in fired and now >= due:
                    new += level_rows(call, route, level, type_=type_, key=f"call:{call.pk}:ep{ep}:L{level}", episode_seq=ep, episode_at=episode_at, at=due, kinds=kinds)
        elif route.repeat_s:
            level = min(max(fired), len(route.levels) - 1)
            done = max((r["repeat"] for r in rows), default=0)
            # Repeats count from the claim; only the next one is written per tick.
            due = call.claimed_at + timedelta(seconds=route.repeat_s * (done + 1))
            if now >= due:
                new += level_rows(
                    call,
                    route,
                    level,
                    type_=type_,
                    key=f"call:{call.pk}:ep{ep}:R{done + 1}",
                    episode_seq=ep,
                    episode_at=episode_at,
                    at=due,
                    kinds=kinds,
                    repeat=done + 1,
                    extra={"claimed_by": call.claimed_by_name},
                )
        if new:
            with transaction.atomic():
                written += rows_write(new)
    return written + resolutions_tick(kinds=kinds)


def calls_relink() -> int:
    """Point outbox rows whose call row no longer exists (the projections were rebuilt) at the
    call as it is now; returns the number of calls found again. A call is found from the first
    event that caused one of its rows, as the projector found it then: by ``start_seq``, or by
    idempotency key (the latest start of that key)."""
    gone = ~Exists(UncertainCall.objects.filter(pk=OuterRef("call_pk")))
    orphans = (
        Notification.objects.filter(call_pk__isnull=False, event_seq__isnull=False).filter(gone).values("call_pk", "run_id").annotate(seq=Min("event_seq")).order_by()
    )
    found = 0
    for o in orphans:
        (ev,) = events_read(run_id=o["run_id"], after=o["seq"] - 1, upto=o["seq"]) or (None,)
        p = ev.payload if ev is not None else {}
        if p.get("start_seq") is not None:
            call = UncertainCall.objects.filter(run_id=o["run_id"], start_seq=p["start_seq"]).first()
        elif p.get("idempotency_key"):
            call = UncertainCall.objects.filter(run_id=o["run_id"], idempotency_key=p["idempotency_key"]).order_by("-start_seq").first()
        else:
            call = None
        if call is not None:
            found += bool(Notification.objects.filter(call_pk=o["call_pk"], run_id=o["run_id"]).update(call_pk=call.pk))
    return found


def resolutions_tick(*, kinds: dict[str, str]) -> list[int]:
    """Write ``call.resolved`` to each channel that was paged about a now resolved call and has not
    been told; returns the ids written. The logical key is per call and channel, so a resolve the
    projector already wrote for that channel (under its event's key) is found by the ``Exists``,
    and two ticks racing write one row."""
    told = Notification.objects.filter(action="resolve", call_pk=OuterRef("call_pk"), channel=OuterRef("channel"))
    over = UncertainCall.objects.filter(pk=OuterRef("call_pk"), state=UncertainCall.State.RESOLVED)
    missing = sorted(
        set(
            Notification.objects.filter(action="trigger", call_pk__isnull=False)
            .filter(Exists(over), ~Exists(told))
            .values_list("call_pk", "channel")
        )
    )
    if not missing:
        return []
    calls = UncertainCall.objects.in_bulk({pk for pk, _ in missing})
    rows = [
        Notification(
            logical_key=f"call:{pk}:resolved:{channel}",
            type="call.resolved",
            action="resolve",
            channel=channel,
            kind=kinds.get(channel, ""),
            call_pk=pk,
            run_id=calls[pk].run_id,
            tenant=calls[pk].tenant,
            event_seq=calls[pk].resolved_seq,
            extra={"disposition": calls[pk].disposition, "resolved_by": calls[pk].resolved_by},
            cause_at=calls[pk].updated_at,
        )
        for pk, channel in missing
    ]
    with transaction.atomic():
        return rows_write(rows)


def digest_calls(*, now: datetime) -> dict[str, list[UncertainCall]]:
    """The overdue irreversible calls, by tenant, oldest deadline first."""
    out: dict[str, list[UncertainCall]] = {}
    for call in UncertainCall.objects.overdue(now).filter(risk_class=UncertainCall.Risk.IRREVERSIBLE).order_by("deadline", "id"):
        out.setdefault(call.tenant, []).append(call)
    return out


def digests_tick(*, now: datetime | None = None) -> list[int]:
    """Write each route's daily digest of overdue irreversible calls, per tenant, once its local
    time has come today. A tenant with none gets no digest."""
    now = now or djtz.now()
    routes, kinds = routes_load()
    due = [r for r in routes if r.digest]
    if not due:
        return []
    by_tenant = digest_calls(now=now)
    fields = sensitive_fields()
    rows: list[Notification] = []
    for route in due:
        local = now.astimezone(zoneinfo.ZoneInfo(route.digest["timezone"]))
        hour, minute = (int(x) for x in route.digest["at"].split(":"))
        if (local.hour, local.minute) < (hour, minute):
            continue
        for tenant, calls in sorted(by_tenant.items()):
            if route.tenant is not None and tenant not in route.tenant:
                continue
            listed = [c for c in calls if (route.tool is None or c.tool in route.tool)]
            if not listed:
                continue
            values = run_sensitive_values(run_ids=sorted({c.run_id for c in listed}), fields=fields)
            data = {
                "tenant": tenant,
                "date": local.date().isoformat(),
                "calls": [
                    {
                        "run_id": c.run_id,
                        "call_id": c.call_id,
                        "tool": c.tool,
                        "risk_class": c.risk_class,
                        "idempotency_key": c.idempotency_key,
                        "reason": c.escalation_reason or c.uncertain_reason,
                        "deadline": format_ts(c.deadline),
                        "url": call_url(c.pk),
                    }
                    for c in listed
                ],
            }
            body = {"type": "digest.overdue", "timestamp": format_ts(now), "data": value_mask(data, fields, values)}
            for channel in route.digest["notify"]:
                rows.append(
                    Notification(
                        logical_key=f"digest:{route.position}:{tenant}:{local.date().isoformat()}:{channel}",
                        type="digest.overdue",
                        action="trigger",
                        channel=channel,
                        kind=kinds.get(channel, ""),
                        tenant=tenant,
                        body=body,
                    )
                )
    with transaction.atomic():
        return rows_write(rows)
