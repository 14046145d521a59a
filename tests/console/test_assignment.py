"""A call is handed only to someone who can decide it, by every path; an escalation keeps its reason."""

from __future__ import annotations

from html import unescape

from runs.models import Event
from tests.console.helpers import _user, client_for


def _notes(run_id="run-conflict"):
    return Event.objects.filter(run_id=run_id, type="operator_note").count()


def test_a_single_assign_refuses_an_unknown_an_inactive_and_a_non_deciding_user_by_name(oncall, compliance, conflict_call, roles):
    _user("ivy.inactive", "oncall", is_active=False)
    c = client_for(oncall)
    for name, why in (("nobody.here", "there is no user 'nobody.here'"), ("ivy.inactive", "'ivy.inactive' is inactive"), ("colin.compliance", "'colin.compliance' cannot decide calls")):
        resp = c.post(f"/calls/{conflict_call.pk}/assign/", {"assignee": name, "seen_version": conflict_call.version}, follow=True)
        assert why in unescape(resp.content.decode()), name
    assert _notes() == 0
    resp = c.post(f"/calls/{conflict_call.pk}/assign/", {"assignee": "olivia.oncall", "seen_version": conflict_call.version}, follow=True)
    assert "Assigned to olivia.oncall" in unescape(resp.content.decode()) and _notes() == 1


def test_a_bulk_assign_refuses_the_same_people_in_preview_and_apply(oncall, manager, conflict_call):
    c = client_for(oncall)
    base = {"action": "assign", "scope": "selected", "ids": [conflict_call.pk], f"v_{conflict_call.pk}": conflict_call.version}
    for name, why in (("nobody.here", "there is no user"), ("mandy.manager", "'mandy.manager' cannot decide calls")):
        preview = unescape(c.post("/queue/bulk/", {**base, "assignee": name, "step": "preview"}).content.decode())
        assert why in preview, name
        applied = unescape(c.post("/queue/bulk/", {**base, "assignee": name, "step": "apply"}).content.decode())
        assert why in applied and "skipped" in applied, name
    assert _notes() == 0
    c.post("/queue/bulk/", {**base, "assignee": "olivia.oncall", "step": "apply"})
    assert _notes() == 1


def test_escalating_to_someone_who_cannot_decide_writes_nothing(oncall, manager, conflict_call):
    before = Event.objects.filter(run_id="run-conflict").count()
    resp = client_for(oncall).post(
        f"/calls/{conflict_call.pk}/decide/", {"seen_version": conflict_call.version, "decision": "escalate", "reason": "ledger team", "assignee": "mandy.manager"}
    )
    assert resp.status_code == 400 and "'mandy.manager' cannot decide calls" in unescape(resp.content.decode())
    assert Event.objects.filter(run_id="run-conflict").count() == before


def test_an_escalation_keeps_the_first_reason_and_shows_the_re_escalation(oncall, conflict_call):
    assert conflict_call.escalation_reason == "conflict"
    c = client_for(oncall)
    resp = c.post(f"/calls/{conflict_call.pk}/decide/", {"seen_version": conflict_call.version, "decision": "escalate", "reason": "needs the ledger team"})
    assert resp.status_code == 302
    conflict_call.refresh_from_db()
    assert conflict_call.escalation_reason == "conflict" and conflict_call.state == "escalated"
    again = Event.objects.filter(run_id="run-conflict", type="approval_requested").order_by("-seq").first()
    assert again.payload["reason"] == "conflict" and again.payload["re_escalation"] is True
    body = unescape(c.get(f"/calls/{conflict_call.pk}/").content.decode())
    assert "Escalated, waiting for a person: the receiver holds a different operation under its key." in body and "re-escalated by olivia.oncall: needs the ledger team" in body


def test_an_old_log_whose_re_escalation_says_escalated_keeps_the_first_reason_on_rebuild(oncall, conflict_call):
    from recovery.models import UncertainCall
    from recovery.rebuild import projections_rebuild
    from runs.leases import lease_acquire, lease_release
    from runs.models import Run
    from runs.store import NewEvent, events_append

    run = Run.objects.get(run_id="run-conflict")
    lease = lease_acquire(run_id="run-conflict", holder="old-writer")
    about = {"call_id": conflict_call.call_id, "idempotency_key": conflict_call.idempotency_key, "start_seq": conflict_call.start_seq}
    events_append(run_id="run-conflict", epoch=lease.epoch, expected_seq=run.last_seq, events=[NewEvent("approval_requested", {**about, "reason": "escalated", "question": "escalated by someone"})])
    lease_release(run_id="run-conflict", epoch=lease.epoch)
    assert UncertainCall.objects.get(pk=conflict_call.pk).escalation_reason == "conflict"
    projections_rebuild()
    assert UncertainCall.objects.get(run_id="run-conflict").escalation_reason == "conflict"
