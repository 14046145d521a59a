import re
from html import unescape

import pytest

from runs.models import Event
from tests.console.helpers import client_for


def decide(client, call, **data):
    return client.post(f"/calls/{call.pk}/decide/", {"seen_version": call.version, **data})


def test_the_approval_screen_shows_what_a_person_needs_to_decide(oncall, conflict_call):
    body = client_for(oncall).get(f"/calls/{conflict_call.pk}/").content.decode()
    assert conflict_call.idempotency_key in body
    assert "840.00" in body and "480.00" in body  # intended and observed, side by side
    assert "differs" in body
    assert "The receiver holds a different operation under this key: amount differs." in body
    # The retry's consequence names the key's retention, the amount and the (masked) target.
    assert "the receiver keeps this key until" in body
    assert "post_correction for 840.00 GBP to account [masked]" in body
    assert "Started</dt>" in body and "ago" in body and " UTC" in body
    assert 'name="decision"' in body


def test_a_decision_needs_a_reason_and_writes_nothing_without_one(oncall, conflict_call):
    before = Event.objects.filter(run_id="run-conflict").count()
    resp = decide(client_for(oncall), conflict_call, decision="not_happened", reason="  ")
    assert resp.status_code == 400
    assert "Give a reason" in resp.content.decode()
    assert Event.objects.filter(run_id="run-conflict").count() == before


def test_a_decision_without_a_choice_says_which_choice_is_missing(oncall, conflict_call):
    before = Event.objects.filter(run_id="run-conflict").count()
    resp = decide(client_for(oncall), conflict_call, reason="Ledger team checked")
    body = resp.content.decode()
    assert resp.status_code == 400
    assert "Choose what you know about this call" in body and "This field is required" not in body
    assert Event.objects.filter(run_id="run-conflict").count() == before


def test_a_retry_must_be_confirmed_in_words(oncall, conflict_call):
    resp = decide(client_for(oncall), conflict_call, decision="retry_same_key", reason="ledger says no")
    assert resp.status_code == 400
    assert "Tick the box under the retry" in resp.content.decode()


def test_the_retry_box_for_a_conflict_says_what_the_retry_sentence_says(oncall, conflict_call):
    page = unescape(client_for(oncall).get(f"/calls/{conflict_call.pk}/").content.decode())
    sentence = re.search(r'<p class="consequence [a-z]+" id="cons-retry">(.*?)</p>', page, re.S).group(1)
    box = re.search(r'<label class="choice" for="id_confirm_twice">(.*?)</label>', page, re.S).group(1)
    assert "most likely" in sentence and "twice" not in sentence, sentence  # a conflict whose key the receiver keeps
    quoted = box.removeprefix("I have read what a retry does here: ").rstrip(".")
    assert quoted != box and quoted in sentence and "twice" not in box, (box, sentence)


def test_an_on_call_decision_becomes_an_event_with_the_deciding_user(oncall, conflict_call):
    resp = decide(client_for(oncall), conflict_call, decision="not_happened", reason="Ledger team reversed C-801 by hand")
    assert resp.status_code == 302
    ev = Event.objects.filter(run_id="run-conflict", type="approval_decided").order_by("-seq").first()
    assert ev.payload["by"] == "olivia.oncall" and ev.payload["decision"] == "not_happened"
    assert ev.payload["reason"] == "Ledger team reversed C-801 by hand"
    conflict_call.refresh_from_db()
    assert conflict_call.state == "resolved"


def test_a_double_submit_writes_one_event_and_a_stale_view_is_refused_clearly(oncall, conflict_call):
    c = client_for(oncall)
    first = decide(c, conflict_call, decision="escalate", reason="needs the ledger team")
    second = decide(c, conflict_call, decision="escalate", reason="needs the ledger team")
    assert first.status_code == 302 and second.status_code == 409
    body = second.content.decode()
    assert "You had already acted on this call (in another tab or window)" in body and "someone else" not in body
    assert "It is still open" in body and "decide again only if it is still needed" in body


def test_a_decision_on_a_call_resolved_meanwhile_names_who_resolved_it_and_offers_nothing_to_redo(oncall, conflict_call):
    from tests.console.helpers import _user

    other = _user("oscar.oncall", "oncall")
    assert decide(client_for(other), conflict_call, decision="not_happened", reason="ledger team reversed it").status_code == 302
    late = decide(client_for(oncall), conflict_call, decision="not_happened", reason="same here")
    body = late.content.decode()
    assert late.status_code == 409
    assert "oscar.oncall acted on this call first" in body and "not happened" in body
    assert "Resolved: it did not happen (decided by oscar.oncall)" in body and "nothing left to decide" in body
    assert "resolved: Resolved" not in body  # the state is said once, not twice in a row
    assert f'href="/calls/{conflict_call.pk}/"' in body and 'id="decide-submit"' not in body
    assert Event.objects.filter(run_id="run-conflict", type="approval_decided").count() == 1


def test_a_compliance_reviewer_sees_no_decision_controls_and_cannot_post_one(compliance, conflict_call):
    c = client_for(compliance)
    body = c.get(f"/calls/{conflict_call.pk}/").content.decode()
    assert 'name="decision"' not in body and "cannot decide" not in body and "not decide it" in body
    assert decide(c, conflict_call, decision="not_happened", reason="x").status_code == 403


def test_sensitive_fields_are_masked_on_every_screen_and_export_and_a_reveal_is_recorded(oncall, compliance, conflict_call):
    from access.models import AccessRecord

    for path in (f"/calls/{conflict_call.pk}/", "/runs/run-conflict/", "/queue/"):
        body = client_for(oncall).get(path).content.decode()
        assert "[masked]" in body, path
        assert "AC-4020" not in body, path  # not in fields, not in the raw evidence text either
    c = client_for(compliance)
    jsonl = b"".join(c.get("/runs/run-conflict/export.jsonl").streaming_content).decode()
    assert '"account": "AC-4020"' in jsonl  # compliance may view sensitive data; the export is recorded
    refused = c.post(f"/runs/run-conflict/events/{conflict_call.start_seq}/reveal/", {"path": "arguments.account"})
    assert refused.status_code == 400 and "say why" in refused.content.decode() and "AC-4020" not in refused.content.decode()
    assert not AccessRecord.objects.filter(front_end="console").exists()  # no reason, no value, no record
    resp = c.post(f"/runs/run-conflict/events/{conflict_call.start_seq}/reveal/", {"path": "arguments.account", "reason": "ticket LEDGER-88: confirm the account"})
    assert resp.status_code == 200 and "AC-4020" in resp.content.decode()
    recs = {r.front_end: r for r in AccessRecord.objects.filter(run_id="run-conflict")}
    assert set(recs) == {"console", "export"}
    reveal, export = recs["console"], recs["export"]
    assert (reveal.actor_kind, reveal.actor_id, reveal.actor_name) == ("user", compliance.pk, "colin.compliance")
    assert (reveal.seq, reveal.fields, reveal.why, reveal.tenant) == (conflict_call.start_seq, ["arguments.account"], "ticket LEDGER-88: confirm the account", "acme")
    assert export.all_fields and export.why.startswith("GET /runs/run-conflict/export.jsonl (seq 1..")
    assert export.why.endswith(".sha256?upto=" + export.why.split("seq 1..")[1].split(",")[0] + ")"), export.why
    audit = c.get("/runs/run-conflict/").content.decode()
    assert "ticket LEDGER-88: confirm the account" in audit and "every sensitive field of the run" in audit


def test_claiming_shows_who_is_on_a_call_and_a_second_claim_on_a_stale_view_is_refused(oncall, conflict_call, roles):
    from tests.console.helpers import _user

    other = _user("oscar.oncall", "oncall")
    v = conflict_call.version
    assert client_for(oncall).post(f"/calls/{conflict_call.pk}/claim/", {"seen_version": v}).status_code == 302
    resp = client_for(other).post(f"/calls/{conflict_call.pk}/claim/", {"seen_version": v}, follow=True)
    assert "changed since you loaded the page" in resp.content.decode()
    conflict_call.refresh_from_db()
    assert conflict_call.claimed_by_name == "olivia.oncall"


def test_a_note_is_kept_as_a_record_only_event(oncall, conflict_call):
    client_for(oncall).post(f"/calls/{conflict_call.pk}/note/", {"text": "Called the ledger team"})
    note = Event.objects.get(run_id="run-conflict", type="operator_note")
    assert note.payload["text"] == "Called the ledger team" and note.payload["by"] == "olivia.oncall"
    assert "Called the ledger team" in client_for(oncall).get(f"/calls/{conflict_call.pk}/").content.decode()


def test_the_queue_keeps_filters_in_the_url_and_refuses_a_bad_one(manager, conflict_call):
    c = client_for(manager)
    body = c.get("/queue/", {"risk_class": "irreversible", "tenant": "acme"}).content.decode()
    assert "run-conflict" in body
    assert "run-conflict" not in c.get("/queue/", {"tenant": "globex"}).content.decode()
    assert c.get("/queue/", {"risk_class": "nonsense"}).status_code == 400
    assert c.get("/queue/", {"after": "garbage!"}).status_code == 400
    # A bad bookmark is explained with the filters' own names, one sentence after another.
    bad = c.get("/queue/", {"risk_class": "nonsense", "min_age_m": "-3"}).content.decode()
    assert "Risk class: Select a valid choice." in bad and "Older than (minutes): Ensure" in bad
    assert "min_age_m" not in bad.split('id="queue-filter-error"')[1][:400] and ".;" not in bad
    part = c.get("/queue/", {"tenant": "acme"}, HTTP_HX_REQUEST="true").content.decode()
    assert "<html" not in part and "run-conflict" in part


def test_bulk_happened_is_previewed_then_applied_only_where_evidence_matches(oncall, conflict_call):
    c = client_for(oncall)
    preview = c.post("/queue/bulk/", {"action": "happened", "scope": "selected", "ids": [conflict_call.pk], "reason": "matched", "step": "preview"})
    body = preview.content.decode()
    assert preview.status_code == 200 and "no matching evidence" in body and "Apply to" not in body
    claim = c.post("/queue/bulk/", {"action": "claim", "scope": "all", "filters": "tenant=acme", "step": "preview"}).content.decode()
    assert "claim for olivia.oncall" in claim
    applied = c.post("/queue/bulk/", {"action": "claim", "scope": "selected", "ids": [conflict_call.pk], f"v_{conflict_call.pk}": conflict_call.version, "step": "apply"})
    assert "1 of 1 applied" in applied.content.decode()
    assert "done done" not in applied.content.decode() and '<span class="badge ok">done</span> claim for olivia.oncall' in applied.content.decode()


def test_a_bulk_action_that_cannot_be_prepared_goes_back_to_the_queue_with_its_filters_and_the_same_calls_selected(oncall, conflict_call):
    from html import unescape
    from urllib.parse import parse_qs, urlsplit

    from tests.console.helpers import _calls

    _calls(3)
    c = client_for(oncall)
    queue = c.get("/queue/", {"tenant": "acme", "risk_class": "irreversible"}).content.decode()
    shown = re.findall(r'name="ids" value="(\d+)"', queue)
    assert len(shown) >= 2 and "checked" not in re.search(r"<tbody>.*?</tbody>", queue, re.S).group(0)
    filters = unescape(re.search(r'<input type="hidden" name="filters" value="([^"]*)"', queue).group(1))
    chosen = [shown[0], shown[-1]]
    # Assign with nobody named: the bulk action cannot be prepared.
    resp = c.post("/queue/bulk/", {"action": "assign", "scope": "selected", "ids": chosen, "assignee": " ", "filters": filters, "step": "preview"})
    assert resp.status_code == 400 and "Name the person" in resp.content.decode()
    back = unescape(re.search(r'<a href="([^"]+)">Back to the queue</a>', resp.content.decode()).group(1))
    query = parse_qs(urlsplit(back).query)
    assert urlsplit(back).path == "/queue/" and query["tenant"] == ["acme"] and query["risk_class"] == ["irreversible"]
    again = c.get(back).content.decode()
    checked = re.findall(r'<input type="checkbox" name="ids" value="(\d+)"[^>]*\bchecked\b', again)
    assert sorted(checked) == sorted(chosen)
    # The selection is for this visit only: the next bulk action's filters and the refresh do not carry it.
    assert "selected" not in unescape(re.search(r'<input type="hidden" name="filters" value="([^"]*)"', again).group(1))
    assert "selected" not in unescape(re.search(r'hx-get="([^"]*)" hx-trigger="every 15s"', again).group(1))
    # A preview's "Cancel" leads back the same way.
    preview = c.post("/queue/bulk/", {"action": "claim", "scope": "selected", "ids": chosen, "filters": filters, "step": "preview"}).content.decode()
    cancel = unescape(re.search(r'<a href="([^"]+)">Cancel</a>', preview).group(1))
    assert parse_qs(urlsplit(cancel).query)["selected"] == chosen and parse_qs(urlsplit(cancel).query)["tenant"] == ["acme"]


def test_bulk_retry_is_not_offered(oncall, conflict_call):
    body = client_for(oncall).get("/queue/").content.decode()
    assert 'value="retry_same_key"' not in body
    resp = client_for(oncall).post("/queue/bulk/", {"action": "retry_same_key", "scope": "selected", "ids": [conflict_call.pk], "step": "preview"})
    assert resp.status_code == 400


def test_the_overview_names_overdue_irreversible_calls_and_draws_svg_charts(manager, conflict_call):
    body = client_for(manager).get("/overview/").content.decode()
    assert "run-conflict" in body and "Past deadline by" in body
    assert body.count("<svg") == 2
    # No chart library and no inline script: every script is one of the console's own files.
    scripts = re.findall(r"<script[^>]*>", body)
    assert scripts and all(re.fullmatch(r'<script src="/static/(django_htmx|console)/[\w.-]+\.js" defer>', s) for s in scripts), scripts
    # The chart's hour labels carry no zone of their own, so its visible heading names it.
    heading = re.search(r'<h2 id="chart1-h"[^>]*>(.*?)</h2>', body).group(1)
    assert "UTC" in heading, heading


def test_the_decision_log_finds_decisions_by_user_tool_and_disposition(oncall, manager, conflict_call):
    decide(client_for(oncall), conflict_call, decision="not_happened", reason="reversed by hand")
    c = client_for(manager)
    assert "reversed by hand" in c.get("/decisions/", {"by": "olivia.oncall"}).content.decode()
    assert "reversed by hand" in c.get("/decisions/", {"tool": "post_correction", "disposition": "not_happened"}).content.decode()
    assert "reversed by hand" not in c.get("/decisions/", {"tenant": "globex"}).content.decode()
    assert "reversed by hand" not in c.get("/decisions/", {"until": "2001-01-01"}).content.decode()
    assert c.get("/decisions/", {"since": "yesterday"}).status_code == 400


def test_an_error_that_quotes_the_receivers_json_is_masked_on_the_approval_screen(oncall, conflict_call):
    from recovery.models import UncertainCall
    from runs.leases import lease_acquire, lease_release
    from runs.store import NewEvent, events_append

    quoted = 'ledger answered {"account": "AC-4020", "error": "busy"}'
    lease = lease_acquire(run_id="run-conflict", holder="reconciler")
    events_append(
        run_id="run-conflict",
        epoch=lease.epoch,
        expected_seq=lease.last_seq,
        events=[
            NewEvent(
                "reconciliation_attempted",
                {"call_id": conflict_call.call_id, "idempotency_key": conflict_call.idempotency_key, "start_seq": conflict_call.start_seq,
                 "attempt": conflict_call.attempts + 1, "outcome": "unavailable", "evidence": {}, "error": quoted, "rule": "unavailable: look again later"},
            )
        ],
    )
    lease_release(run_id="run-conflict", epoch=lease.epoch)
    call = UncertainCall.objects.get(pk=conflict_call.pk)
    assert "AC-4020" in call.last_error  # the read model keeps the fact; the screen must not show it
    body = client_for(oncall).get(f"/calls/{call.pk}/").content.decode()
    assert "AC-4020" not in body and "[masked]" in body


def test_the_decision_log_pages_newest_first_across_runs_without_gaps_or_repeats(manager):
    from console.decision_log import decision_cursor_parse, decisions_search
    from runs.leases import lease_acquire
    from runs.store import NewEvent, events_append

    written = []
    for run_id in ("run-a", "run-b"):
        lease = lease_acquire(run_id=run_id, holder="test", ttl_seconds=60)
        events_append(run_id=run_id, epoch=lease.epoch, expected_seq=0, events=[NewEvent("run_started", {"run_id": run_id})])
        batch = []
        for i in range(4):
            batch.append(NewEvent("approval_decided", {"call_id": f"c{i}", "approved": True, "by": "olivia.oncall", "reason": f"{run_id} person {i}"}))
            batch.append(NewEvent("tool_call_resolved", {"idempotency_key": f"k{i}", "disposition": "completed", "rule": f"{run_id} rule {i}"}))
        events_append(run_id=run_id, epoch=lease.epoch, expected_seq=1, events=batch)
        written += [(run_id, seq) for seq in range(2, 10)]

    seen, cursor, pages = [], None, 0
    while True:
        page = decisions_search(before=cursor, limit=3)
        seen += [(e.run_id, e.seq) for e in page.items]
        pages += 1
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert pages == 6 and sorted(seen) == sorted(written) and len(seen) == len(set(seen)) == 16
    keys = [(e.ts, e.run_id, e.seq) for e in decisions_search(limit=100).items]
    assert keys == sorted(keys, reverse=True)

    people = decisions_search(kind="person", limit=100).items
    rules = decisions_search(kind="automatic", limit=100).items
    assert {e.type for e in people} == {"approval_decided"} and len(people) == 8
    assert {e.type for e in rules} == {"tool_call_resolved"} and len(rules) == 8
    assert [e.payload["rule"] for e in decisions_search(by="run-b rule 2", limit=100).items] == ["run-b rule 2"]

    c = client_for(manager)
    first = c.get("/decisions/")
    assert first.status_code == 200
    for bad in ("12", "abc.1.run-a", "1.x.run-a", "1.2."):
        response = c.get("/decisions/", {"before": bad})
        assert response.status_code == 400 and "cursor" in response.content.decode()
    with pytest.raises(ValueError):
        decision_cursor_parse("not a cursor")


def test_a_person_chooses_a_time_zone_and_times_stay_in_utc_with_their_local_time_on_hover(oncall, conflict_call):
    c = client_for(oncall)
    page = c.get("/preferences/").content.decode()
    assert '<option value="" selected>' in page and 'aria-describedby="tz-help"' in page
    refused = c.post("/preferences/", {"time_zone": "Mars/Olympus"})
    assert refused.status_code == 400
    assert 'aria-invalid="true"' in refused.content.decode() and 'id="tz-error"' in refused.content.decode()
    assert c.post("/preferences/", {"time_zone": "Europe/Berlin"}).status_code == 302
    page = c.get("/preferences/").content.decode()
    assert '<option value="Europe/Berlin" selected>' in page and page.count(" selected>") == 1
    body = c.get(f"/calls/{conflict_call.pk}/").content.decode()
    started = conflict_call.started_at.astimezone(__import__("zoneinfo").ZoneInfo("Europe/Berlin"))
    assert f'title="{started:%Y-%m-%d %H:%M:%S} CET (Europe/Berlin)">{conflict_call.started_at:%Y-%m-%d %H:%M:%S} UTC</time>' in body
    # Another session of the same person reads the preference from the database.
    assert "(Europe/Berlin)" in client_for(oncall).get(f"/calls/{conflict_call.pk}/").content.decode()
    assert c.post("/preferences/", {"time_zone": ""}).status_code == 302
    assert "(Europe/Berlin)" not in c.get(f"/calls/{conflict_call.pk}/").content.decode()


def test_a_run_state_shows_its_cost_as_money(oncall, v1_runs):
    # run-q3-recon's turns cost 0.0053 + 0.0071 + 0.0078, which a float adds up to 0.020200000000000003.
    from runs.models import Run

    last = Run.objects.get(run_id="run-q3-recon").last_seq
    body = client_for(oncall).get("/runs/run-q3-recon/", {"at": last}).content.decode()
    assert "cost 0.0202 USD" in body and "cost 0.020200000000000003" not in body


def test_an_empty_mine_view_says_how_calls_become_yours_and_where_the_others_are(oncall, conflict_call):
    body = client_for(oncall).get("/queue/", {"view": "mine"}).content.decode()
    empty = re.search(r'<td colspan="9"[^>]*>(.*?)</td>', body, re.S).group(1)
    assert "You hold no" in empty and "claim" in empty
    assert 'href="/queue/?view=unassigned"' in empty and 'href="/queue/"' in empty


def test_the_second_tabs_refusal_names_the_escalation_it_lost_to(oncall, conflict_call):
    c = client_for(oncall)
    assert decide(c, conflict_call, decision="escalate", reason="needs the ledger team").status_code == 302
    body = decide(c, conflict_call, decision="escalate", reason="needs the ledger team").content.decode()
    assert ": escalate." in body and "approval requested" not in body.split('id="stale"')[1].split("</div>")[0]


def test_a_reason_over_the_limit_is_refused_naming_the_reason_and_the_limit(oncall, conflict_call):
    resp = decide(client_for(oncall), conflict_call, decision="escalate", reason="x" * 2001)
    assert resp.status_code == 400
    assert "The reason is too long: at most 2000 characters (it has 2001)" in resp.content.decode()
    assert 'maxlength="2000"' in resp.content.decode() and 'id="reason-count"' in resp.content.decode()


def test_deciding_a_call_someone_else_holds_says_who_holds_it(oncall, conflict_call):
    from tests.console.helpers import _user

    other = _user("oscar.oncall", "oncall")
    assert client_for(other).post(f"/calls/{conflict_call.pk}/claim/", {"seen_version": conflict_call.version}).status_code == 302
    page = client_for(oncall).get(f"/calls/{conflict_call.pk}/").content.decode()
    assert "oscar.oncall is on this call" in page
    assert "is on this call" not in client_for(other).get(f"/calls/{conflict_call.pk}/").content.decode()


def test_the_queue_says_how_long_past_its_deadline_a_call_is(oncall, conflict_call):
    page = client_for(oncall).get("/queue/").content.decode()
    assert "min past it" in page


def test_after_deciding_the_page_repeats_the_reason_and_evidence_and_offers_the_next_call(oncall, conflict_call):
    from tests.console.helpers import _calls

    _calls(1)
    client = client_for(oncall)
    data = {"seen_version": conflict_call.version, "decision": "happened", "reason": "seen in the ledger", "evidence_ref": "LEDGER-TKT-9001"}
    page = client.post(f"/calls/{conflict_call.pk}/decide/", data, follow=True).content.decode()
    assert "with your reason “seen in the ledger”. Evidence: LEDGER-TKT-9001." in page
    assert 'id="next-call"' in page and f'href="/calls/{conflict_call.pk}/" id="next-call"' not in page


def test_after_deciding_the_page_says_whether_the_run_goes_on(oncall, conflict_call):
    client = client_for(oncall)
    # Escalated again: the run still waits on the call.
    page = unescape(client.post(f"/calls/{conflict_call.pk}/decide/", {"seen_version": conflict_call.version, "decision": "escalate", "reason": "ledger team to check"}, follow=True).content.decode())
    assert "Run run-conflict still waits on this call." in page
    conflict_call.refresh_from_db()
    # Settled, and the run (whose agent went away) has nothing else in doubt: it resumes when reopened.
    page = unescape(client.post(f"/calls/{conflict_call.pk}/decide/", {"seen_version": conflict_call.version, "decision": "not_happened", "reason": "ledger team reversed it"}, follow=True).content.decode())
    assert "Nothing in run run-conflict is in doubt any more: the run is stopped and resumes when its agent opens it again" in page


def test_the_overviews_needs_attention_now_names_who_holds_each_call_and_its_totals_say_their_period(manager, oncall, conflict_call):
    assert client_for(oncall).post(f"/calls/{conflict_call.pk}/claim/", {"seen_version": conflict_call.version}).status_code == 302
    body = client_for(manager).get("/overview/").content.decode()
    table = body.split('id="overdue-h"')[1].split("</table>")[0]
    assert '<th scope="col">Who is on it</th>' in table and '<td data-label="Who is on it">olivia.oncall</td>' in table
    assert '<h2 id="totals-h" class="flush">Right now</h2>' in body
    assert "count every call recorded (all time)" in body.split('id="risk-period"')[1].split("</p>")[0]
    head = body.split('id="risk-h"')[1].split("<thead>")[1].split("</thead>")[0]
    assert head.count("(all time)") == 3 and head.count("(now)") == 3
