"""The decision log: one line per recovery decision, logged on commit, its free text masked by its
own run's sensitive values; the lines of one transaction share one read of the masking."""

import logging

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from recovery.masking import sealed_fields
from recovery.policy_changes import policies_load
from runs.leases import lease_acquire
from runs.store import NewEvent, events_append

pytestmark = pytest.mark.django_db(transaction=True)

POLICY = """
[tools.post_correction]
risk_class       = "irreversible"
strategy         = "escalate"
deadline         = "15m"
sensitive_fields = ["account"]
"""


class Lines(logging.Handler):
    def __init__(self):
        super().__init__()
        self.records = []

    def emit(self, record):
        self.records.append(record)


@pytest.fixture
def decisions():
    handler, logger = Lines(), logging.getLogger("reckon.recovery.decisions")
    logger.addHandler(handler)
    yield handler.records
    logger.removeHandler(handler)


def _run_with_a_call(run_id: str, account: str):
    lease = lease_acquire(run_id=run_id, holder="agent", ttl_seconds=60)
    start = {"call_id": "c1", "name": "post_correction", "arguments": {"tenant": "acme", "account": account}, "idempotency_key": f"k-{run_id}"}
    events_append(run_id=run_id, epoch=lease.epoch, expected_seq=0, events=[NewEvent("run_started", {"run_id": run_id}), NewEvent("tool_call_started", start)])
    return lease


def _uncertain(run_id: str, lease, reason: str):
    payload = {"call_id": "c1", "idempotency_key": f"k-{run_id}", "start_seq": 2, "reason": reason}
    events_append(run_id=run_id, epoch=lease.epoch, expected_seq=2, events=[NewEvent("tool_call_uncertain", payload)])


def test_the_lines_of_one_commit_are_masked_each_by_its_own_runs_values_after_one_read_of_the_masking(decisions):
    policies_load(text=POLICY, by="dana.oncall")
    a, b = _run_with_a_call("run-a", "ACCT-AAAA-1111"), _run_with_a_call("run-b", "ACCT-BBBB-2222")
    sealed_fields()  # the append path's own cached read of the same names, out of the count
    reason = "the receiver said ACCT-AAAA-1111 and ACCT-BBBB-2222 were both locked"
    with CaptureQueriesContext(connection) as queries:
        with transaction.atomic():
            _uncertain("run-a", a, reason)
            _uncertain("run-b", b, reason)
    lines = {r.run_id: r.decision for r in decisions if r.event == "tool_call_uncertain"}
    assert lines == {
        "run-a": "the receiver said [masked] and ACCT-BBBB-2222 were both locked",
        "run-b": "the receiver said ACCT-AAAA-1111 and [masked] were both locked",
    }
    # recovery.masking.sensitive_fields: the names alone (the projection reads whole policies).
    names_reads = [q["sql"] for q in queries.captured_queries if q["sql"].startswith('SELECT "reckon_tool_policy"."sensitive_fields" AS "sensitive_fields" FROM')]
    assert len(names_reads) == 1, names_reads


def test_a_decision_rolled_back_is_never_logged_and_the_next_commit_reads_the_masking_again(decisions):
    policies_load(text=POLICY, by="dana.oncall")
    a = _run_with_a_call("run-a", "ACCT-AAAA-1111")
    with pytest.raises(RuntimeError), transaction.atomic():
        _uncertain("run-a", a, "rolled back ACCT-AAAA-1111")
        raise RuntimeError
    assert [r for r in decisions if r.event == "tool_call_uncertain"] == []
    _uncertain("run-a", a, "kept ACCT-AAAA-1111")
    assert [r.decision for r in decisions if r.event == "tool_call_uncertain"] == ["kept [masked]"]


def test_a_log_level_that_drops_the_lines_drops_the_reads_of_their_masking_too(decisions):
    policies_load(text=POLICY, by="dana.oncall")
    a = _run_with_a_call("run-a", "ACCT-AAAA-1111")
    sealed_fields()
    logger = logging.getLogger("reckon.recovery.decisions")
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        with CaptureQueriesContext(connection) as queries:
            _uncertain("run-a", a, "locked")
    finally:
        logger.setLevel(level)
    assert [r for r in decisions if r.event == "tool_call_uncertain"] == []
    masking = ('SELECT "reckon_tool_policy"."sensitive_fields" AS', 'SELECT "reckon_run"."run_id" AS "run_id", "reckon_run"."created_at"')
    assert not [q["sql"] for q in queries.captured_queries if q["sql"].startswith(masking)]
    b = _run_with_a_call("run-b", "ACCT-BBBB-2222")
    _uncertain("run-b", b, "locked")  # at INFO again: logged, as before
    assert [r.run_id for r in decisions if r.event == "tool_call_uncertain"] == ["run-b"]
