"""/metrics: Prometheus text read from the database, behind a read token or a session."""

from __future__ import annotations

import pytest

from runs.errors import StaleEpoch
from runs.leases import lease_acquire, lease_release
from runs.store import NewEvent, events_append
from tests.recovery.helpers import _uncertain_call
from tests.api.helpers import _samples

pytestmark = pytest.mark.django_db(transaction=True)


def test_metrics_count_appends_fencing_rejections_and_uncertain_calls_by_risk(reader):
    _uncertain_call("run-m-1", "acme")  # 3 events: started, tool start, uncertain
    lease = lease_acquire(run_id="run-m-2", holder="a")
    events_append(run_id="run-m-2", epoch=lease.epoch, expected_seq=0, events=[NewEvent("run_started", {"run_id": "run-m-2"})])
    lease_release(run_id="run-m-2", epoch=lease.epoch)
    lease_acquire(run_id="run-m-2", holder="b")
    with pytest.raises(StaleEpoch):
        events_append(run_id="run-m-2", epoch=lease.epoch, expected_seq=1, events=[NewEvent("user_message", {"content": "late"})])

    r = reader.get("/metrics")
    assert r.status_code == 200 and r["Content-Type"].startswith("text/plain")
    m = _samples(r.content.decode())
    assert m[("reckon_events_appended_total", (("origin", "live"),))] == 4
    assert m[("reckon_fencing_rejections_total", ())] == 1
    assert m[("reckon_uncertain_calls_opened_total", (("risk_class", "irreversible"),))] == 1
    assert m[("reckon_uncertain_calls_open", (("risk_class", "irreversible"),))] == 1
    assert m[("reckon_uncertain_call_oldest_age_seconds", (("risk_class", "irreversible"),))] >= 0
    assert ("reckon_overdue_irreversible_calls", ()) in m


def test_metrics_need_a_read_token_without_tenant_limits(outsider, agent, tenant_a, db):
    from django.test import Client

    from access.tokens import token_create
    from tests.api.helpers import Api

    assert outsider.get("/metrics").status_code == 401
    _, secret = token_create(name="appender", scopes=["append"])
    assert Api(Client(), secret).get("/metrics").status_code == 403
    assert tenant_a.get("/metrics").status_code == 403
    assert agent.get("/metrics").status_code == 200


def test_overdue_irreversible_calls_are_counted_not_just_listed(reader):
    from datetime import timedelta

    from django.utils import timezone

    from recovery.models import UncertainCall

    for i in range(3):
        _uncertain_call(f"run-late-{i}", "acme")
    UncertainCall.objects.filter(run_id__in=["run-late-0", "run-late-1"]).update(deadline=timezone.now() - timedelta(minutes=5))
    m = _samples(reader.get("/metrics").content.decode())
    assert m[("reckon_overdue_irreversible_calls", ())] == 2
    assert m[("reckon_uncertain_calls_overdue", (("risk_class", "irreversible"),))] == 2


def test_calls_in_flight_are_counted_wherever_they_are_held(reader):
    """A plain call in flight lives in the narrow table, a flagged one in the queue table: the
    figure counts both, beside the open call detection made."""
    from recovery.models import InFlightCall, UncertainCall
    from runs.leases import lease_acquire as acquire

    _uncertain_call("run-m-open", "acme")
    lease = acquire(run_id="run-m-flying", holder="agent", ttl_seconds=300)
    start = {"name": "post_correction", "arguments": {"tenant": "acme", "amount": "1"}, "idempotency_key": "k-same"}
    events = [NewEvent("run_started", {"run_id": "run-m-flying"})]
    events += [NewEvent("tool_call_started", {**start, "call_id": c}) for c in ("a", "b", "c")]
    events_append(run_id="run-m-flying", epoch=lease.epoch, expected_seq=0, events=events)
    done = {"call_id": "b", "name": "post_correction", "content": "ok", "is_error": False, "idempotency_key": "k-same"}
    events_append(run_id="run-m-flying", epoch=lease.epoch, expected_seq=4, events=[NewEvent("tool_call_completed", done)])
    events_append(run_id="run-m-flying", epoch=lease.epoch, expected_seq=5, events=[NewEvent("tool_call_started", {**start, "call_id": "d", "idempotency_key": "k-other"})])
    # a and c were flagged by b's completion (full rows); d is a plain start (the narrow table).
    assert UncertainCall.objects.filter(state="in_flight").count() == 2 and InFlightCall.objects.count() == 1

    m = _samples(reader.get("/metrics").content.decode())
    assert m[("reckon_uncertain_calls_by_state", (("state", "in_flight"),))] == 3
    assert m[("reckon_uncertain_calls_by_state", (("state", "open"),))] == 1
    assert m[("reckon_uncertain_calls_by_state", (("state", "resolved"),))] == 0


def test_wrong_tokens_on_metrics_count_toward_the_apis_limit_on_failed_tokens(db, settings):
    """/metrics checks a Bearer token by the API's one rule (api.auth.token_principal): an address
    that keeps presenting wrong tokens gets 429 with Retry-After there too, and its failures on
    /metrics and on /api/ are one count."""
    from django.test import Client

    from access.tokens import token_create
    from tests.api.helpers import _address, _fresh_window

    settings.RECKON_API_AUTH_FAILURES, settings.RECKON_API_AUTH_WINDOW_S = 5, 120
    _fresh_window(120)
    _, good = token_create(name="scraper", scopes=["read"])
    client, addr = Client(), _address()
    codes = [client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer rk_guess{i}", REMOTE_ADDR=addr).status_code for i in range(8)]
    assert codes == [401] * 5 + [429] * 3
    refused = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {good}", REMOTE_ADDR=addr)
    assert refused.status_code == 429 and 1 <= int(refused["Retry-After"]) <= 120
    assert "failed token attempts from this address" in refused.content.decode()
    # One count: the API refuses the same address, and failures on the API close /metrics.
    assert client.get("/api/runs", HTTP_AUTHORIZATION=f"Bearer {good}", REMOTE_ADDR=addr).status_code == 429
    other = _address()
    for i in range(5):
        assert client.get("/api/runs", HTTP_AUTHORIZATION=f"Bearer rk_nope{i}", REMOTE_ADDR=other).status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {good}", REMOTE_ADDR=other).status_code == 429
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {good}", REMOTE_ADDR=_address()).status_code == 200
