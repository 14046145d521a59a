"""The fold, without a database: determinism, the vocabulary, compaction, pairing, failures."""

import enum
import json
import subprocess
import sys
from pathlib import Path

import pytest

from runs import events as registry
from runs.events import EventType, UnknownEventType
from runs.fold import RULES, Event, FoldError, fold
from reckon_client.identity import call_key, idempotency_key, signature
from tests.golden import fixture_logs
from tests.runs.helpers import RUN, completed, log, started


ROOT = Path(__file__).resolve().parents[2]


def test_folding_the_same_log_twice_gives_equal_state():
    for path in fixture_logs():
        from runs.importer import log_parse
        from runs.upcasters import events_upcast

        parsed = log_parse(str(path), path.read_bytes())
        evs = events_upcast(parsed.events, parsed.run_id)
        assert fold(evs).to_dict() == fold(evs).to_dict()
        assert json.dumps(fold(evs).to_dict(), sort_keys=True) == json.dumps(fold(evs).to_dict(), sort_keys=True)


def test_every_registered_type_is_classified_and_has_a_rule():
    for t in EventType:
        assert (t in registry.STATE_CHANGING) != (t in registry.RECORD_ONLY), t
        assert t.value in RULES, t
        assert t in registry.REQUIRED_FIELDS, t


def test_a_new_type_without_a_classification_fails_the_registry_check(monkeypatch):
    Extended = enum.Enum("Extended", {**{m.name: m.value for m in EventType}, "SURPRISE": "surprise"}, type=str)
    monkeypatch.setattr(registry, "EventType", Extended)
    with pytest.raises(registry.RegistryIncomplete, match="surprise"):
        registry.registry_complete(registry.STATE_CHANGING, registry.RECORD_ONLY, registry.REQUIRED_FIELDS)


def test_the_completeness_checks_run_under_python_dash_o():
    """``assert`` vanishes under -O; the import-time checks must not."""
    code = (
        "from runs import events as r\n"
        "try:\n"
        "    r.registry_complete(r.STATE_CHANGING - {r.EventType.USER_MESSAGE}, r.RECORD_ONLY, r.REQUIRED_FIELDS)\n"
        "except r.RegistryIncomplete as exc:\n"
        "    print('refused:', exc)\n"
    )
    done = subprocess.run([sys.executable, "-O", "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "refused: event types neither state-changing nor record-only" in done.stdout and "user_message" in done.stdout


def test_folding_an_undeclared_type_raises():
    evs = log(("user_message", {"content": "hi"})) + [Event(3, "mystery", {})]
    with pytest.raises(UnknownEventType, match="mystery"):
        fold(evs)


def test_a_gap_or_repeat_in_seq_raises():
    evs = log(("user_message", {"content": "a"}))
    with pytest.raises(FoldError, match="seq 4 does not follow seq 2"):
        fold(evs + [Event(4, "user_message", {"content": "b"})])
    with pytest.raises(FoldError, match="seq 2 does not follow seq 2"):
        fold(evs + [Event(2, "user_message", {"content": "b"})])


def test_a_version_newer_than_the_reader_is_refused():
    evs = log(("user_message", {"content": "a"})) + [Event(3, "user_message", {"content": "b"}, None, 99)]
    with pytest.raises(FoldError, match="schema version 99"):
        fold(evs)


def test_compaction_keeps_the_first_message_the_summary_and_the_kept_tail_exactly():
    evs = log(
        ("user_message", {"content": "task"}),
        ("model_turn", {"text": "t1"}),
        ("user_message", {"content": "u2"}),
        ("model_turn", {"text": "t2"}),
        ("user_message", {"content": "u3"}),
        ("context_compacted", {"summary": "S", "kept": 2}),
    )
    st = fold(evs)
    assert [(m.role, m.content, m.trust) for m in st.messages] == [
        ("user", "task", "user"),
        ("user", "S", "untrusted"),
        ("assistant", "t2", "model"),
        ("user", "u3", "user"),
    ]
    assert st.compactions == 1 and st.turns == 2
    st0 = fold(evs[:-1] + [Event(7, "context_compacted", {"summary": "S", "kept": 0})])
    assert [m.content for m in st0.messages] == ["task", "S"]


def test_a_proven_failure_closes_its_start_but_occupies_no_key_and_a_success_then_does():
    key = call_key(RUN, "issue_refund", {"amount": "129.00"})
    evs = log(
        started("c1", "issue_refund", {"amount": "129.00"}),
        completed("c1", "issue_refund", "declined", key=None, is_error=True),
    )
    st = fold(evs)
    assert st.uncertain_calls == [] and st.completed_calls == {}
    evs += [
        Event(4, *started("c2", "issue_refund", {"amount": "129.00"})),
        Event(5, *completed("c2", "issue_refund", "RF-1", key=key)),
    ]
    st = fold(evs)
    assert st.completed_calls == {key: "RF-1"} and st.uncertain_calls == []
    assert st.trajectory == ["issue_refund", "issue_refund"]


def test_an_unmatched_start_is_uncertain_with_its_recorded_or_computed_key():
    st = fold(log(started("c1", key="recorded-key"), started("c2", "notify", {"to": "fca"})))
    assert [(c.call_id, c.idempotency_key, c.start_seq) for c in st.uncertain_calls] == [
        ("c1", "recorded-key", 2),
        ("c2", call_key(RUN, "notify", {"to": "fca"}), 3),
    ]
    assert st.to_dict()["uncertain_calls"][0]["started_at"] == "2026-09-08T11:00:00Z"


def test_a_completion_pairs_by_call_id_first_then_by_key():
    # c9's completion names a different call id but the same key as c1's start.
    st = fold(log(started("c1", key="K1"), started("c2", key="K2"), completed("c9", key="K1")))
    assert [c.call_id for c in st.uncertain_calls] == ["c2"]
    # By call id even when the recorded keys disagree.
    st = fold(log(started("c1", key="K1"), started("c2", key="K2"), completed("c2", key="K1")))
    assert [c.call_id for c in st.uncertain_calls] == ["c1"]


def test_a_completion_without_the_key_field_completes_its_starts_key():
    st = fold(log(started("c1", key="K1"), completed("c1", key=...)))
    assert st.completed_calls == {"K1": "ok"}


def test_usage_cost_status_approvals_and_memory_fold():
    st = fold(
        log(
            ("model_turn", {"text": "a", "usage": {"input_tokens": 10, "output_tokens": 2}, "cost_usd": 0.5}),
            ("model_turn", {"text": "b", "usage": {"input_tokens": 5, "output_tokens": 1}, "cost_usd": 0.25}),
            ("approval_requested", {"call_id": "c1", "question": "file it?"}),
        )
    )
    assert st.usage == {"input_tokens": 15, "output_tokens": 3} and st.cost_usd == 0.75
    assert st.status == "awaiting_approval" and st.pending_approvals == {"c1": "file it?"}
    st = fold(
        log(
            ("approval_requested", {"call_id": "c1", "question": "q"}),
            ("approval_decided", {"call_id": "c1", "approved": True, "by": "dana", "reason": "ok"}),
            ("memory_written", {"key": "k", "value": 1}),
            ("guardrail_triggered", {"severity": "WARN", "rule": "pii", "action": "redacted"}),
            ("run_finished", {"outcome": "completed"}),
        )
    )
    assert st.status == "finished" and st.outcome == "completed" and st.memory == {"k": 1}


def test_the_fold_imports_nothing_from_django():
    import ast
    from pathlib import Path

    import runs.fold

    tree = ast.parse(Path(runs.fold.__file__).read_text())
    names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert names and not [n for n in names if n.startswith("django")]


def test_the_signature_is_canonical_and_the_key_follows_the_contract():
    a = signature("post", {"amount": 10, "acct": "x", "note": "é"})
    b = signature("post", {"note": "é", "acct": "x", "amount": 10})
    assert a == b == 'post:{"acct":"x","amount":10,"note":"é"}'
    import hashlib

    assert idempotency_key("run-1", a) == hashlib.sha256(f"run-1|{a}".encode()).hexdigest()[:24]
    assert len(idempotency_key("run-1", a)) == 24 and idempotency_key("run-2", a) != idempotency_key("run-1", a)


def test_fold_apply_by_apply_and_a_fold_of_plain_tuples_give_the_same_state_and_the_same_refusals():
    from copy import deepcopy

    from runs.fold import RunState, apply
    from runs.importer import log_parse
    from runs.snapshot_format import state_dumps
    from runs.upcasters import events_upcast

    def by_apply(evs, st=None):
        st = deepcopy(st) if st is not None else RunState()
        for ev in evs:
            apply(st, ev)
        return st

    def refusal(fn):
        with pytest.raises(Exception) as info:
            fn()
        return type(info.value), str(info.value)

    for path in fixture_logs():
        parsed = log_parse(str(path), path.read_bytes())
        evs = events_upcast(parsed.events, parsed.run_id)
        whole = state_dumps(fold(evs))
        assert state_dumps(by_apply(evs)) == whole, path.name
        assert state_dumps(fold([tuple(ev) for ev in evs])) == whole, path.name
        half = len(evs) // 2
        assert state_dumps(fold(evs[half:], fold(evs[:half]))) == whole, path.name
        # Started at a given state: fold copies it, apply changes it in place; both end equal.
        assert state_dumps(by_apply(evs[half:], by_apply(evs[:half]))) == whole, path.name
        for bad in (Event(len(evs) + 2, "user_message", {"content": "x"}), Event(len(evs) + 1, "user_message", {"content": "x"}, None, 99), Event(len(evs) + 1, "mystery", {})):
            assert refusal(lambda: fold(evs + [bad])) == refusal(lambda: by_apply(evs + [bad])), (path.name, bad)
        assert refusal(lambda: fold(evs + [Event(len(evs) + 1, "tool_call_started", {"name": "x"})]))[0] is KeyError


def test_the_fold_reads_the_timestamp_of_the_types_it_names_and_of_no_other():
    # runs.store.events_replay leaves out the timestamp of every type not in TIMESTAMPED; the state
    # must not change. And the named ones are needed: without theirs, it does change.
    from runs.fold import TIMESTAMPED
    from runs.importer import log_parse
    from runs.snapshot_format import state_dumps
    from runs.upcasters import events_upcast

    needed = 0
    for path in fixture_logs():
        parsed = log_parse(str(path), path.read_bytes())
        evs = events_upcast(parsed.events, parsed.run_id)
        assert {ev.type for ev in evs} - TIMESTAMPED, path.name
        whole = state_dumps(fold(evs))
        assert state_dumps(fold([ev._replace(ts=None) if ev.type not in TIMESTAMPED else ev for ev in evs])) == whole, path.name
        if state_dumps(fold([ev._replace(ts=None) for ev in evs])) != whole:
            needed += 1
    assert needed
