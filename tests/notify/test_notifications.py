"""Notifications end to end against real receivers on 127.0.0.1: an escalation pages level 1, the
climb, a claim, repeats, resolution, the digest, retries with one webhook-id, dead letters."""

from __future__ import annotations

import email
import json
import threading
from datetime import timedelta

import pytest
from django.db import transaction

from notify.delivery import notification_deliver
from notify.models import DeliveryAttempt, Notification
from recovery.decisions import call_claim, call_release, decision_record
from recovery.models import UncertainCall
from tests.notify.helpers import deliver_all, escalated, now, tick
from tests.helpers import at_once

pytestmark = pytest.mark.django_db
ONCALL = "dana.oncall"


def _mail_types(smtp) -> list[str]:
    return [email.message_from_bytes(m)["Subject"].split(": ")[1].split(" call ")[1] for m in smtp.messages]


def test_an_escalation_notifies_level_1_on_every_channel_with_a_verified_signature(routes, smtp):
    call = escalated("run-n1")
    assert deliver_all() == 2
    assert routes.bad_signatures == 0 and list(routes.by_id.values()) == [1]
    (body,) = routes.bodies
    assert body["type"] == "call.escalated"
    d = body["data"]
    assert (d["run_id"], d["call_id"], d["tool"], d["risk_class"], d["idempotency_key"], d["reason"]) == (
        "run-n1",
        "call_n2",
        "notify_regulator",
        "irreversible",
        call.idempotency_key,
        call.escalation_reason,
    )
    assert d["url"].endswith(f"/calls/{call.pk}/") and d["deadline"]
    (mail,) = smtp.messages
    msg = email.message_from_bytes(mail)
    assert msg["To"] == "oncall@example.com" and "notify_regulator" in msg["Subject"] and f"/calls/{call.pk}/" in msg.get_payload()
    assert routes.pd == [] and routes.slack == []  # level 2 has not fired


def test_no_claim_within_the_level_2_delay_notifies_level_2_once(routes):
    call = escalated("run-n2")
    deliver_all()
    assert tick(now() + timedelta(minutes=14)) == []
    assert len(tick(now() + timedelta(minutes=16))) == 2
    assert tick(now() + timedelta(minutes=17)) == []  # written once
    deliver_all()
    (pd,) = routes.pd
    assert (pd["event_action"], pd["dedup_key"], pd["routing_key"]) == ("trigger", f"reckon-call-{call.pk}", "R0UT1NGKEY")
    assert pd["payload"]["severity"] == "critical" and pd["payload"]["custom_details"]["level"] == 2
    assert len(routes.slack) == 1 and "run-n2" in routes.slack[0]["text"]


def test_a_claim_stops_the_climb_and_acknowledges_on_the_channels_paged(routes, smtp):
    call = escalated("run-n3")
    deliver_all()
    call_claim(pk=call.pk, user=ONCALL, seen_version=call.version)
    deliver_all()
    assert routes.types() == ["call.escalated", "call.acknowledged"]
    assert routes.bodies[1]["data"]["acknowledged_by"] == ONCALL
    assert _mail_types(smtp) == ["escalated", "acknowledged"]
    assert tick(now() + timedelta(minutes=30)) == []
    assert routes.pd == []


def test_releasing_a_claim_restarts_the_climb(routes):
    call = escalated("run-n4")
    call = call_claim(pk=call.pk, user=ONCALL, seen_version=call.version)
    call_release(pk=call.pk, user=ONCALL, seen_version=call.version)
    deliver_all()
    assert routes.types() == ["call.escalated", "call.acknowledged", "call.escalated"]
    assert len(tick(now() + timedelta(minutes=16))) == 2


def test_the_repeat_interval_renotifies_the_claimers_level(routes):
    call = escalated("run-n5")
    call_claim(pk=call.pk, user=ONCALL, seen_version=call.version)
    deliver_all()
    assert tick(now() + timedelta(minutes=59)) == []
    assert len(tick(now() + timedelta(minutes=61))) == 2  # level 1: webhook and mail
    deliver_all(now() + timedelta(minutes=61))
    assert routes.types() == ["call.escalated", "call.acknowledged", "call.escalated"]
    assert routes.bodies[-1]["data"]["repeat"] == 1 and routes.bodies[-1]["data"]["claimed_by"] == ONCALL
    assert len(tick(now() + timedelta(minutes=121))) == 2  # and again


def test_a_resolution_sends_resolve_to_every_channel_that_was_triggered(routes, smtp):
    call = escalated("run-n6")
    tick(now() + timedelta(minutes=16))
    deliver_all()
    call.refresh_from_db()
    decision_record(pk=call.pk, decision="not_happened", by=ONCALL, reason="nothing on the portal", seen_version=call.version)
    deliver_all()
    assert routes.types() == ["call.escalated", "call.resolved"]
    assert routes.bodies[1]["data"]["disposition"] == "not_happened"
    assert [(p["event_action"], p["dedup_key"]) for p in routes.pd] == [("trigger", f"reckon-call-{call.pk}"), ("resolve", f"reckon-call-{call.pk}")]
    assert len(routes.slack) == 2 and _mail_types(smtp) == ["escalated", "resolved"]
    assert tick(now() + timedelta(hours=5)) == []  # a resolved call climbs no more


def test_the_digest_lists_exactly_the_overdue_irreversible_calls(routes, smtp):
    """Per tenant, the unresolved irreversible calls past their deadline; not one due later, not
    a resolved one, not a read-only one however late."""
    from notify.escalation import digests_tick
    from tests.recovery.helpers import crashed_run

    morning = (now() + timedelta(days=1)).replace(hour=9, minute=30, second=0, microsecond=0)  # past 08:00 in London
    regulator = "notify_regulator"  # irreversible, strategy escalate (deadline 10m)
    late = crashed_run("run-d-late", [("c1", regulator, {"tenant": "initech", "notice": "N-1", "recipient": "fca"})], ts=morning - timedelta(hours=2))[0]
    other = crashed_run("run-d-globex", [("c1", regulator, {"tenant": "globex", "notice": "N-2", "recipient": "fca"})], ts=morning - timedelta(hours=2))[0]
    soon = crashed_run("run-d-soon", [("c1", regulator, {"tenant": "initech", "notice": "N-3", "recipient": "fca"})], ts=morning - timedelta(minutes=1))[0]
    done = crashed_run("run-d-done", [("c1", regulator, {"tenant": "initech", "notice": "N-4", "recipient": "fca"})], ts=morning - timedelta(hours=2))[0]
    crashed_run("run-d-read", [("c1", "read_ledger", {"tenant": "initech", "q": 1})], ts=morning - timedelta(hours=3))
    decision_record(pk=done.pk, decision="not_happened", by=ONCALL, reason="nothing on the portal", seen_version=done.version)
    assert {c.run_id for c in UncertainCall.objects.overdue(morning)} >= {"run-d-late", "run-d-globex", "run-d-read"}
    assert soon.deadline > morning and late.deadline < morning and other.deadline < morning

    assert len(digests_tick(now=morning)) == 4  # two tenants, two channels each
    assert digests_tick(now=morning + timedelta(minutes=5)) == []  # once a day
    deliver_all()
    digests = {b["data"]["tenant"]: b["data"] for b in routes.bodies if b["type"] == "digest.overdue"}
    assert {t: [(c["run_id"], c["call_id"]) for c in d["calls"]] for t, d in digests.items()} == {"initech": [("run-d-late", "c1")], "globex": [("run-d-globex", "c1")]}
    listed = digests["initech"]["calls"][0]
    assert (listed["tool"], listed["risk_class"], listed["url"]) == (regulator, "irreversible", f"http://127.0.0.1:8000/calls/{late.pk}/")
    mails = [email.message_from_bytes(m) for m in smtp.messages if b"overdue irreversible" in m]
    assert len(mails) == 2
    for m in mails:
        text = m.get_payload(decode=True).decode()
        assert "run-d-soon" not in text and "run-d-done" not in text and "run-d-read" not in text and "/calls/" in text


def test_a_receiver_answering_500_three_times_sees_one_webhook_id_and_one_notification(routes):
    routes.script = [500, 500, 500]
    escalated("run-n8")
    later = now()
    for _ in range(4):
        deliver_all(later)
        later += timedelta(hours=2)  # past any backoff
    hook = Notification.objects.get(channel="ops-webhook")
    assert hook.state == "delivered" and hook.attempts == 4
    assert routes.attempt_ids == [hook.delivery_id] * 4
    assert routes.by_id == {hook.delivery_id: 1} and len(routes.bodies) == 1
    attempts = list(DeliveryAttempt.objects.filter(notification=hook).values_list("status_code", "ok"))
    assert attempts == [(500, False), (500, False), (500, False), (200, True)]


def test_a_receiver_down_past_the_retry_limit_leaves_a_dead_letter(routes, settings, client, django_user_model):
    settings.RECKON_NOTIFY_MAX_ATTEMPTS = 3
    routes.server.shutdown()
    routes.server.server_close()
    escalated("run-n9")
    later = now()
    for _ in range(5):
        deliver_all(later)
        later += timedelta(hours=2)
    hook = Notification.objects.get(channel="ops-webhook")
    assert (hook.state, hook.attempts) == ("dead", 3)
    assert all(a.error and a.status_code is None for a in hook.delivery_attempts.all())
    assert Notification.objects.get(channel="oncall-mail").state == "delivered"  # one channel failing blocks no other
    from api.metrics import metrics_text

    text = metrics_text().decode()
    assert 'reckon_notifications_dead{channel="ops-webhook"} 1.0' in text
    admin = django_user_model.objects.create_superuser("root", password="pw-long-enough-1")
    client.force_login(admin)
    page = client.get("/notifications/").content.decode()
    assert "dead" in page and hook.delivery_id in page


def test_no_sensitive_value_appears_in_any_delivered_body(routes, smtp):
    """Every kind of message on every kind of channel (escalation, both levels, acknowledgement,
    repeat, resolution, digest), searched in the raw bytes received and in the decoded e-mail."""
    from notify.escalation import digests_tick
    from recovery.policy_changes import policy_update

    policy_update(tool="notify_regulator", fields={"sensitive_fields": ["recipient", "tenant"]}, by=ONCALL)
    claimed = escalated("run-n10", {"tenant": "tenant-XQ-SECRET-91", "notice": "NTC-22", "recipient": "regulator-ZZ-SECRET-17"})
    climbing = escalated("run-n10b", {"tenant": "tenant-XQ-SECRET-91", "notice": "NTC-23", "recipient": "regulator-ZZ-SECRET-18"})
    call_claim(pk=claimed.pk, user=ONCALL, seen_version=claimed.version)
    tick(now() + timedelta(minutes=90))  # the claimed one repeats, the other climbs to pager and slack
    climbing.refresh_from_db()
    decision_record(pk=climbing.pk, decision="not_happened", by=ONCALL, reason="nothing on the portal", seen_version=climbing.version)
    morning = (now() + timedelta(days=1)).replace(hour=9, minute=30)
    assert digests_tick(now=morning)
    deliver_all()
    sent = {b["type"] for b in routes.bodies}
    assert sent == {"call.escalated", "call.acknowledged", "call.resolved", "digest.overdue"}
    assert len(routes.pd) == 2 and len(routes.slack) == 2 and len(smtp.messages) >= 5
    decoded = [email.message_from_bytes(m).get_payload(decode=True) for m in smtp.messages]
    for raw in [*routes.raw, *smtp.messages, *decoded]:
        assert b"SECRET" not in raw


def test_every_channel_names_the_risk_class_tool_run_deadline_and_reason_and_links_to_the_call(routes, smtp):
    call = escalated("run-n15")
    tick(now() + timedelta(minutes=16))
    deliver_all()
    deadline = call.deadline.strftime("%Y-%m-%dT%H:%M:%S")
    url = f"http://127.0.0.1:8000/calls/{call.pk}/"
    assert call.escalation_reason  # a reason to name
    facts = ["irreversible", "notify_regulator", "run-n15", deadline, call.escalation_reason, url]
    (hook,) = routes.bodies
    (pd,) = routes.pd
    (slack,) = routes.slack
    (mail,) = [email.message_from_bytes(m).get_payload(decode=True).decode() for m in smtp.messages]
    texts = {
        "webhook": json.dumps(hook["data"]),
        "pagerduty": pd["payload"]["summary"] + json.dumps(pd["payload"]["custom_details"]) + json.dumps(pd["links"]),
        "slack": slack["text"],
        "email": mail,
    }
    for kind, text in texts.items():
        missing = [f for f in facts if f not in text]
        assert not missing, f"{kind} lacks {missing}: {text}"
    assert pd["links"] == [{"href": url, "text": "Reckon console"}]


def test_an_old_event_notifies_nobody(routes, settings):
    settings.RECKON_NOTIFY_MAX_EVENT_AGE_S = 0
    escalated("run-n11")
    assert Notification.objects.count() == 0


def test_rebuilding_the_projections_pages_nobody_and_the_climb_goes_on(routes):
    from recovery.rebuild import projections_rebuild

    claimed = escalated("run-n16")
    call_claim(pk=claimed.pk, user=ONCALL, seen_version=claimed.version)
    escalated("run-n17")
    written = list(Notification.objects.values_list("id", flat=True))
    assert len(written) == 6  # two escalations and an acknowledgement, on two channels each
    projections_rebuild()
    assert list(Notification.objects.values_list("id", flat=True)) == written
    assert tick(now()) == []
    later = tick(now() + timedelta(minutes=16))  # the unclaimed call still climbs to level 2
    assert sorted(Notification.objects.filter(id__in=later).values_list("run_id", "channel")) == [("run-n17", "pager"), ("run-n17", "team-slack")]


def test_the_outbox_row_is_written_with_its_event_or_not_at_all(routes):
    class Undo(Exception):
        pass

    with pytest.raises(Undo), transaction.atomic():
        escalated("run-n12")
        assert Notification.objects.filter(run_id="run-n12").count() == 2
        raise Undo
    assert Notification.objects.filter(run_id="run-n12").count() == 0
    assert not UncertainCall.objects.filter(run_id="run-n12").exists()


def test_the_commit_of_the_escalation_hands_its_notifications_to_the_workers(routes, smtp, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        escalated("run-n13")
    assert routes.types() == ["call.escalated"] and len(smtp.messages) == 1
    assert set(Notification.objects.values_list("state", flat=True)) == {"delivered"}


def test_a_late_live_completion_by_the_agent_sends_resolve_to_every_channel_that_was_triggered(routes, smtp):
    """The agent comes back and records the completion itself: the call resolves by the log,
    with no tool_call_resolved, and everyone who was paged hears that it is over."""
    from runs.leases import lease_acquire
    from runs.models import Run
    from runs.store import NewEvent, events_append

    call = escalated("run-n14")
    tick(now() + timedelta(minutes=16))  # level 2 too: pager and slack
    deliver_all()
    lease = lease_acquire(run_id="run-n14", holder="agent-7:worker-b", ttl_seconds=300)
    last = Run.objects.get(run_id="run-n14").last_seq
    done = {"call_id": call.call_id, "name": call.tool, "content": "filed", "is_error": False, "idempotency_key": call.idempotency_key, "source": "live"}
    events_append(run_id="run-n14", epoch=lease.epoch, expected_seq=last, events=[NewEvent("tool_call_completed", done)])
    call.refresh_from_db()
    assert call.state == UncertainCall.State.RESOLVED
    assert len(tick(now())) == 4  # one resolve per channel paged: webhook, mail, pager, slack
    assert tick(now()) == []  # written once
    deliver_all()
    assert routes.types() == ["call.escalated", "call.resolved"]
    assert routes.bodies[1]["data"]["disposition"] == "completed"
    assert [(p["event_action"], p["dedup_key"]) for p in routes.pd] == [("trigger", f"reckon-call-{call.pk}"), ("resolve", f"reckon-call-{call.pk}")]
    assert len(routes.slack) == 2 and "resolved" in routes.slack[1]["text"]
    assert _mail_types(smtp) == ["escalated", "resolved"]


def test_a_delivered_or_dead_notification_is_never_sent_again(routes, settings):
    escalated("run-n-once")
    assert deliver_all() == 2
    hook = Notification.objects.get(channel="ops-webhook")
    assert (hook.state, hook.attempts, routes.by_id) == ("delivered", 1, {hook.delivery_id: 1})
    # A worker handed the row again (a duplicated task, beat's sweep racing the on-commit send)
    # finds nothing to claim: the row is no longer pending, though it is due and nobody holds it.
    later = now() + timedelta(hours=2)
    assert notification_deliver(notification_id=hook.pk, now=later) is None
    assert routes.by_id == {hook.delivery_id: 1} and len(routes.raw) == 1
    # A dead letter stays dead: it is shown to people, not retried behind their back.
    Notification.objects.filter(pk=hook.pk).update(state="dead")
    assert notification_deliver(notification_id=hook.pk, now=later) is None
    assert len(routes.raw) == 1
    hook.refresh_from_db()
    assert (hook.state, hook.attempts, hook.delivery_attempts.count()) == ("dead", 1, 1)


def test_a_notification_another_worker_holds_is_not_claimed_until_its_lock_runs_out(routes, settings):
    escalated("run-n-held")
    hook = Notification.objects.get(channel="ops-webhook")
    at = now()
    # Another worker claimed it a moment ago and is still sending: its lock runs to at + lock.
    Notification.objects.filter(pk=hook.pk).update(locked_until=at + timedelta(seconds=settings.RECKON_NOTIFY_LOCK_S))
    assert notification_deliver(notification_id=hook.pk, now=at) is None
    assert notification_deliver(notification_id=hook.pk, now=at + timedelta(seconds=settings.RECKON_NOTIFY_LOCK_S - 1)) is None
    assert routes.raw == [] and Notification.objects.get(pk=hook.pk).attempts == 0
    # A worker that died holding it leaves it to the next one once the lock has run out.
    assert notification_deliver(notification_id=hook.pk, now=at + timedelta(seconds=settings.RECKON_NOTIFY_LOCK_S + 1)) is None
    hook.refresh_from_db()
    assert (hook.state, hook.attempts, routes.by_id) == ("delivered", 1, {hook.delivery_id: 1})


@pytest.mark.django_db(transaction=True)
def test_two_workers_handed_one_notification_at_once_send_it_once(routes, settings):
    """Two workers, each on its own connection, released together by a barrier onto one row. The
    receiver holds every request unanswered until a worker has returned, so the loser's claim is
    made while the winner is still sending (pending, locked): it must see the lock and stand off."""
    settings.RECKON_NOTIFY_DELIVER_ON_COMMIT = False  # the two workers below are the only senders
    escalated("run-n-race")
    hook = Notification.objects.get(channel="ops-webhook")
    routes.hold = threading.Event()
    deliver = lambda: notification_deliver(notification_id=hook.pk)  # noqa: E731
    # A worker that has its answer lets the receiver answer the other.
    results, errors = at_once(deliver, deliver, done=routes.hold.set)
    assert errors == [] and results == [None, None]
    hook.refresh_from_db()
    assert (hook.state, hook.attempts, hook.delivery_attempts.count()) == ("delivered", 1, 1)
    assert routes.by_id == {hook.delivery_id: 1} and len(routes.raw) == 1
