"""The approval screen's wording rules, one case each: no database, plain facts in, sentences out."""

from dataclasses import replace
from datetime import datetime, timedelta, timezone

from recovery.consequences import CAUTION, DANGER, SAFE, UNAVAILABLE, CallFacts, call_wording, money

NOW = datetime(2026, 11, 30, 10, 0, tzinfo=timezone.utc)
BASE = CallFacts(
    now=NOW,
    tool="post_correction",
    state="escalated",
    started_at=NOW - timedelta(minutes=40),
    idempotency_key="k-5f1c",
    deadline=NOW - timedelta(minutes=25),
    key_retention_s=86400,
    retry_window_closes_at=NOW + timedelta(hours=23, minutes=20),
    has_lookup=True,
    has_execute=True,
    last_outcome="absent",
    arguments={"account": "[masked]", "amount": "840.00", "currency": "GBP"},
    amount_field="amount",
    currency_field="currency",
    target_field="account",
)


def test_a_key_still_honoured_says_the_receiver_returns_the_original_instead_of_doing_it_twice():
    w = call_wording(BASE)
    retry = w.choices["retry_same_key"]
    assert retry.level == CAUTION
    assert "until 2026-12-01 09:20 UTC" in retry.text and "cannot also take effect" in retry.text
    assert "post_correction for 840.00 GBP to account [masked]" in retry.text
    assert w.summary[-1] == "Open for 40 min, 25 min past its deadline (2026-11-30 09:35 UTC)."


def test_an_expired_key_names_the_day_it_was_forgotten_and_the_amount_that_may_move_twice():
    f = replace(BASE, started_at=NOW - timedelta(days=83), retry_window_closes_at=NOW - timedelta(days=82), deadline=NOW - timedelta(days=83))
    retry = call_wording(f).choices["retry_same_key"]
    assert retry.level == DANGER
    assert "forgot this key on 2026-09-09 10:00 UTC" in retry.text
    assert "may run post_correction for 840.00 GBP to account [masked] a second time" in retry.text


def test_no_known_retention_says_reckon_does_not_know_and_treats_a_retry_as_possibly_twice():
    f = replace(BASE, key_retention_s=None, retry_window_closes_at=None, last_outcome="")
    w = call_wording(f)
    assert w.choices["retry_same_key"].level == DANGER
    assert "does not know whether the receiver honours idempotency keys" in w.choices["retry_same_key"].text
    assert "a second time" in w.choices["retry_same_key"].text
    assert w.summary[1] == "Nobody has asked the receiver yet."


def test_a_receiver_that_deduplicates_without_a_known_limit_is_named_as_such():
    f = replace(BASE, key_retention_s=None, retry_window_closes_at=None, honours_keys=True, last_outcome="")
    retry = call_wording(f).choices["retry_same_key"]
    assert retry.level == CAUTION and "deduplicates by this key" in retry.text


def test_no_execute_hook_makes_the_retry_unavailable_and_says_why():
    f = replace(BASE, has_execute=False, has_compensate=False)
    w = call_wording(f)
    assert w.choices["retry_same_key"].level == UNAVAILABLE
    assert "has no retry hook" in w.choices["retry_same_key"].text
    assert w.choices["compensate"] == w.choices["compensate"].__class__("Not available: post_correction has no inverse.", UNAVAILABLE)


def test_a_conflict_names_the_differing_fields_and_what_a_retry_would_meet():
    f = replace(BASE, last_outcome="conflict", differing_fields=("amount",))
    w = call_wording(f)
    assert "The receiver holds a different operation under this key: amount differs." in w.summary
    assert w.choices["retry_same_key"].level == CAUTION and "will most likely get the receiver's different operation back" in w.choices["retry_same_key"].text
    assert "differs (amount)" in w.choices["happened"].text and w.choices["happened"].level == CAUTION
    assert "the different operation the receiver holds stays as it is" in w.choices["not_happened"].text
    expired = call_wording(replace(f, retry_window_closes_at=NOW - timedelta(days=1))).choices["retry_same_key"]
    assert expired.level == DANGER and "second, separate operation" in expired.text


def test_the_retry_box_says_what_the_retry_sentence_says_in_every_case():
    cases = {
        "conflict, key kept": replace(BASE, last_outcome="conflict", differing_fields=("amount",)),
        "conflict, key forgotten": replace(BASE, last_outcome="conflict", retry_window_closes_at=NOW - timedelta(days=1)),
        "possible duplicate": replace(BASE, possible_duplicate=True),
        "absent, key forgotten": replace(BASE, last_outcome="absent", retry_window_closes_at=NOW - timedelta(hours=1)),
        "key forgotten": replace(BASE, retry_window_closes_at=NOW - timedelta(hours=1)),
        "absent, key kept": replace(BASE, last_outcome="absent"),
        "key kept": replace(BASE),
        "retention unknown": replace(BASE, retry_window_closes_at=None, honours_keys=False),
    }
    for name, f in cases.items():
        retry = call_wording(f).choices["retry_same_key"]
        assert retry.confirm.startswith("I have read what a retry does here"), name
        # The box speaks of a second run exactly when the sentence beside the retry does.
        warns = any(t in retry.text for t in ("a second time", "once more", "second, separate"))
        assert warns == (retry.level == DANGER) == ("twice" in retry.confirm), (name, retry.level, retry.confirm, retry.text)
    conflict = call_wording(cases["conflict, key kept"]).choices["retry_same_key"]
    said = conflict.confirm.removeprefix("I have read what a retry does here: ").rstrip(".")
    assert "most likely get the receiver's different operation back" in said and said in conflict.text


def test_a_possible_duplicate_warns_that_a_retry_runs_it_once_more():
    f = replace(BASE, possible_duplicate=True, last_outcome="")
    w = call_wording(f)
    assert w.choices["retry_same_key"].level == DANGER
    assert w.choices["retry_same_key"].text.startswith("The same action already completed elsewhere in this run; retrying may run post_correction for 840.00 GBP")
    assert "may be a duplicate" in " ".join(w.summary)
    assert "completion elsewhere in the run stays" in w.choices["not_happened"].text


def test_a_policy_that_names_no_amount_or_target_speaks_of_the_tool_alone():
    f = replace(BASE, amount_field=None, target_field=None, retry_window_closes_at=NOW - timedelta(hours=1))
    text = call_wording(f).choices["retry_same_key"].text
    assert "may run post_correction a second time" in text


def test_recording_only_choices_are_safe_and_escalation_mentions_the_deadline():
    w = call_wording(replace(BASE, last_outcome="match"))
    assert w.choices["happened"].level == SAFE and w.choices["not_happened"].level == SAFE
    assert "25 min past its deadline" in w.choices["escalate"].text


def test_money_is_written_as_people_write_it():
    assert money("840.00", "GBP") == "840.00 GBP"
    assert money(840) == "840.00"
    assert money(1250.5, "EUR") == "1,250.50 EUR"
    assert money(0.020200000000000003, "USD") == "0.0202 USD"
    assert money(0.004) == "0.004"
    assert money("n/a", "USD") == "n/a USD"


def test_a_call_state_reads_as_a_sentence():
    from recovery.consequences import status_words

    assert status_words(state="resolved", disposition="not_happened", resolved_by="oncall", escalation_reason="conflict") == (
        "Resolved: it did not happen (decided by oncall). It had been escalated because the receiver holds a different operation under its key."
    )
    assert status_words(state="resolved", disposition="completed", resolved_by="match: ...", automatic=True) == "Resolved: it happened (settled by a rule)."
    assert status_words(state="escalated", escalation_reason="retention") == "Escalated, waiting for a person: the receiver's key retention had passed."
