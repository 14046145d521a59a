"""Issue 31, finding 7, over HTTP: an event or a run over its size limit is a 413 naming the limit
and its setting, nothing written; a page of events is bounded in bytes, not only in events; (the
agent client's TooLarge: tests/clients/test_size_limits.py)."""

from __future__ import annotations



from runs.models import Run
from runs.store import events_read


def _lease(api, run_id):
    r = api.post(f"/api/runs/{run_id}/lease", {"holder": "agent-1"})
    assert r.status_code == 200, r.content
    return r.json()["epoch"]


def _append(api, run_id, epoch, expected, events):
    return api.post(f"/api/runs/{run_id}/events", {"epoch": epoch, "expected_seq": expected, "events": events})


def _started(api, run_id):
    epoch = _lease(api, run_id)
    r = _append(api, run_id, epoch, 0, [{"type": "run_started", "payload": {"run_id": run_id}}])
    assert r.status_code == 201, r.content
    return epoch


def _text(n):
    return {"type": "user_message", "payload": {"content": "x" * n}}


def test_an_event_over_the_default_limit_is_a_413_naming_the_limit_and_its_setting(agent):
    epoch = _started(agent, "run-big-event")
    r = _append(agent, "run-big-event", epoch, 1, [_text(300 * 1024)])  # under the body limit, over the event's
    assert r.status_code == 413, r.content
    doc = r.json()
    assert doc["code"] == "event_too_large" and doc["setting"] == "RECKON_MAX_EVENT_BYTES" and doc["limit"] == 256 * 1024 and doc["seq"] == 2
    assert "RECKON_MAX_EVENT_BYTES" in doc["detail"] and "262,144" in doc["detail"]
    assert [e.seq for e in events_read(run_id="run-big-event")] == [1]


def test_a_run_over_its_limit_is_a_413_naming_the_limit_and_its_setting(agent, settings):
    settings.RECKON_MAX_RUN_BYTES = 300_000
    epoch = _started(agent, "run-big-run")
    assert _append(agent, "run-big-run", epoch, 1, [_text(200_000)]).status_code == 201
    r = _append(agent, "run-big-run", epoch, 2, [_text(200_000)])
    assert r.status_code == 413, r.content
    doc = r.json()
    assert doc["code"] == "run_too_large" and doc["setting"] == "RECKON_MAX_RUN_BYTES" and doc["limit"] == 300_000 and doc["seq"] == 3
    assert "300,000" in doc["detail"]
    assert Run.objects.get(run_id="run-big-run").last_seq == 2


def test_the_default_body_limit_takes_an_event_at_its_limit_even_fully_escaped(agent):
    epoch = _started(agent, "run-escaped")
    # Each \u0001 is six bytes in the body and in the stored text: the event is just under its limit.
    body_chars = (256 * 1024 - len('{"content":""}')) // 6
    r = _append(agent, "run-escaped", epoch, 1, [{"type": "user_message", "payload": {"content": "\x01" * body_chars}}])
    assert r.status_code == 201, r.content


def test_a_page_of_events_is_bounded_in_bytes_and_leads_on(agent, reader):
    from api.runs import PAGE_BYTES

    epoch = _started(agent, "run-page")
    seq = 1
    for _ in range(6):  # 6 batches of 8 events of 200 KB: 9.6 MB of payloads
        r = _append(agent, "run-page", epoch, seq, [_text(200_000)] * 8)
        assert r.status_code == 201, r.content
        seq += 8
    r = reader.get("/api/runs/run-page/events", after=0, limit=1000)
    assert r.status_code == 200
    doc = r.json()
    assert len(r.content) < PAGE_BYTES + 300_000
    assert doc["next_after"] == doc["events"][-1]["seq"] < 49
    seen = [e["seq"] for e in doc["events"]]
    while doc["next_after"] is not None:
        doc = reader.get("/api/runs/run-page/events", after=doc["next_after"], limit=1000).json()
        seen += [e["seq"] for e in doc["events"]]
    assert seen == list(range(1, 50))
