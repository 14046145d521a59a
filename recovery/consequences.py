"""What each decision on an uncertain call will do, in words, computed from the facts.

One pure function (``call_wording``) holds every wording rule of the approval screen: the summary
of the call and, per choice, the sentence printed next to it. It takes plain facts (``CallFacts``)
and imports nothing from Django, so each case (key still honoured, key forgotten, retention unknown,
no retry hook, conflict, possible duplicate) is a unit test. The sentence next to a button must say
what that button will do in *this* case: a retry after the receiver forgot the key is not "probably
safe", it may do the thing a second time, and the words say so with the amount and the target when
the tool's policy names them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from decimal import Decimal, InvalidOperation
from typing import Any

# Levels a consequence is shown with: danger (may do something twice or undo the wrong thing),
# caution (changes the world, check first), safe (only records), unavailable (the choice is disabled).
DANGER, CAUTION, SAFE, UNAVAILABLE = "danger", "caution", "safe", "unavailable"


@dataclass(frozen=True)
class CallFacts:
    """The facts the wording depends on; ``arguments`` are already masked for the reader."""

    now: datetime
    tool: str
    state: str
    started_at: datetime
    idempotency_key: str = ""
    deadline: datetime | None = None
    key_retention_s: int | None = None
    retry_window_closes_at: datetime | None = None
    honours_keys: bool = False  # the policy says the receiver deduplicates by key (provider_idempotency)
    has_lookup: bool = False
    has_execute: bool = False
    has_compensate: bool = False
    last_outcome: str = ""  # match | absent | conflict | unavailable | "" (not asked)
    differing_fields: tuple[str, ...] = ()
    possible_duplicate: bool = False
    arguments: dict = field(default_factory=dict)
    amount_field: str | None = None
    currency_field: str | None = None
    target_field: str | None = None


@dataclass(frozen=True)
class Consequence:
    text: str
    level: str
    # The box a person must tick before this choice is sent (a retry's), in the same terms as
    # ``text``: "twice" exactly where the sentence warns of a second run (level danger).
    confirm: str = ""


_READ = "I have read what a retry does here"
TWICE = f"{_READ}, and that it may make the effect happen twice."
SAME_KEY = f"{_READ}: it runs the call again under the same key, which the receiver still keeps."


@dataclass(frozen=True)
class Wording:
    summary: list[str]
    choices: dict[str, Consequence]


def money(value: Any, currency: str | None = None) -> str:
    """An amount as people write it: ``840.00 GBP``, ``1,250.50``, ``0.0202 USD`` (never a float's
    ``0.020200000000000003``). A value that is not a number is returned as text."""
    try:
        d = Decimal(str(value))
    except (InvalidOperation, ValueError):
        return f"{value} {currency}".strip() if currency else str(value)
    if not d.is_finite():
        return str(value)
    # Round away binary noise (a float's 17th digit), then keep at least two decimals.
    d = d.quantize(Decimal("1e-6")).normalize() if d.as_tuple().exponent < -6 else d
    text = f"{d:,.2f}" if d.as_tuple().exponent >= -2 else f"{d:,f}"
    return f"{text} {currency}" if currency else text


def day(dt: datetime) -> str:
    return dt.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def span(seconds: float) -> str:
    s = int(abs(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    if s < 86400:
        h, m = divmod(s // 60, 60)
        return f"{h} h {m} min" if m else f"{h} h"
    d, h = divmod(s // 3600, 24)
    return f"{d} d {h} h" if h else f"{d} d"


def _what(f: CallFacts) -> str:
    """``post_correction for 840.00 GBP to account [masked]``, as far as the policy names the parts."""
    args = f.arguments or {}
    parts = [f.tool]
    if f.amount_field and args.get(f.amount_field) is not None:
        parts.append("for " + money(args[f.amount_field], args.get(f.currency_field) if f.currency_field else None))
    if f.target_field and args.get(f.target_field) is not None:
        parts.append(f"to {f.target_field} {args[f.target_field]}")
    return " ".join(parts)


def _key_state(f: CallFacts) -> tuple[str, str]:
    """("open" | "closed" | "unknown", words about the receiver and this key)."""
    if f.retry_window_closes_at is not None:
        if f.retry_window_closes_at > f.now:
            return "open", f"the receiver keeps this key until {day(f.retry_window_closes_at)}"
        return "closed", f"the receiver forgot this key on {day(f.retry_window_closes_at)} ({span((f.now - f.retry_window_closes_at).total_seconds())} ago)"
    if f.honours_keys:
        return "open", "the receiver deduplicates by this key (the policy names no retention limit)"
    return "unknown", "Reckon does not know whether the receiver honours idempotency keys (the policy names no key retention)"


def _summary(f: CallFacts) -> list[str]:
    lines = [f"The agent tried {_what(f)}, started {span((f.now - f.started_at).total_seconds())} ago ({day(f.started_at)})."]
    said = {
        "match": "The receiver reports an operation under this key with every compared field equal: it happened.",
        "absent": "The receiver says, authoritatively, that it has no operation under this key: the original did not take effect.",
        "conflict": "The receiver holds a different operation under this key: " + (", ".join(f.differing_fields) or "some fields") + (" differs." if len(f.differing_fields) == 1 else " differ."),
        "unavailable": "The receiver could not be asked (no answer that settles it); the outcome is unknown.",
    }.get(f.last_outcome)
    if said is None:
        said = "Nobody has asked the receiver yet." if f.has_lookup else "This tool has no lookup: Reckon cannot ask the receiver what happened."
    lines.append(said)
    if f.possible_duplicate:
        lines.append("The same action completed elsewhere in this run: this call may be a duplicate of it.")
    if f.state == "resolved":
        return lines
    open_for = f"{'In flight' if f.state == 'in_flight' else 'Open'} for {span((f.now - f.started_at).total_seconds())}"
    if f.deadline is not None and f.deadline < f.now:
        lines.append(f"{open_for}, {span((f.now - f.deadline).total_seconds())} past its deadline ({day(f.deadline)}).")
    elif f.deadline is not None:
        lines.append(f"{open_for}; its deadline is in {span((f.deadline - f.now).total_seconds())} ({day(f.deadline)}).")
    else:
        lines.append(f"{open_for}; it has no deadline.")
    return lines


def _retry(f: CallFacts) -> Consequence:
    what = _what(f)
    if not f.has_execute:
        return Consequence(f"Not available: {f.tool} has no retry hook, so Reckon cannot run it again. Choose “did not happen” and redo it by hand if it is still needed.", UNAVAILABLE)
    state, key_words = _key_state(f)
    if f.possible_duplicate:
        return Consequence(f"The same action already completed elsewhere in this run; retrying may run {what} once more. {key_words[0].upper() + key_words[1:]}.", DANGER, TWICE)
    if f.last_outcome == "conflict":
        if state == "open":
            back = "a retry with the same key will most likely get the receiver's different operation back (or be refused)"
            return Consequence(f"The receiver already holds a different operation under this key, and {key_words}: {back}, not run {what}.", CAUTION, f"{_READ}: {back}.")
        return Consequence(f"The receiver already holds a different operation under this key, and {key_words}: retrying may run {what} as a second, separate operation.", DANGER, TWICE)
    if state == "closed":
        if f.last_outcome == "absent":
            return Consequence(f"The receiver reported no such operation, but it forgot this key on {day(f.retry_window_closes_at)}: if the original is still being applied, retrying may run {what} a second time.", DANGER, TWICE)
        return Consequence(f"The receiver forgot this key on {day(f.retry_window_closes_at)}: if the original took effect, retrying may run {what} a second time.", DANGER, TWICE)
    if state == "open":
        if f.last_outcome == "absent":
            return Consequence(f"Runs {what} again with the same key; the receiver reported no such operation, and {key_words}, so the original cannot also take effect.", CAUTION, SAME_KEY)
        return Consequence(f"Runs {what} again with the same key; {key_words}, so if the original took effect the receiver returns it instead of doing it twice.", CAUTION, SAME_KEY)
    return Consequence(f"Runs {what} again. {key_words}: if the original took effect, retrying may do it a second time.", DANGER, TWICE)


def _happened(f: CallFacts) -> Consequence:
    if f.last_outcome == "conflict":
        return Consequence(f"Closes the call as done although the receiver's operation differs ({', '.join(f.differing_fields) or 'some fields'}); nothing is sent. Give the evidence that the intended effect exists.", CAUTION)
    if f.last_outcome == "absent":
        return Consequence("Closes the call as done although the receiver reported no such operation; nothing is sent. Give the evidence that it exists.", CAUTION)
    return Consequence("Closes the call as done; nothing is sent to the receiver. The run continues with the effect in place.", SAFE)


def _not_happened(f: CallFacts) -> Consequence:
    tail = " The completion elsewhere in the run stays as it is." if f.possible_duplicate else ""
    if f.last_outcome == "conflict":
        return Consequence("Closes the call without the intended effect; nothing is sent, and the different operation the receiver holds stays as it is." + tail, SAFE)
    return Consequence(f"Closes the call without the effect; nothing is sent, and {_what(f)} will not happen unless someone does it." + tail, SAFE)


def _compensate(f: CallFacts) -> Consequence:
    if not f.has_compensate:
        return Consequence(f"Not available: {f.tool} has no inverse.", UNAVAILABLE)
    if f.last_outcome == "absent":
        return Consequence(f"Runs the inverse of {_what(f)}, although the receiver reported no such operation: it may undo nothing, or fail.", CAUTION)
    return Consequence(f"Runs the inverse of {_what(f)} to undo it; if the original never took effect, the inverse may undo nothing, or fail.", CAUTION)


def _escalate(f: CallFacts) -> Consequence:
    if f.deadline is not None and f.deadline < f.now:
        return Consequence(f"The call stays open, already {span((f.now - f.deadline).total_seconds())} past its deadline, for the person you name (or the queue).", SAFE)
    return Consequence("The call stays open for the person you name (or the queue); nothing is sent.", SAFE)


def call_wording(f: CallFacts) -> Wording:
    """The approval screen's summary and the consequence of each decision (keys as ``Decision``)."""
    return Wording(
        summary=_summary(f),
        choices={
            "happened": _happened(f),
            "retry_same_key": _retry(f),
            "not_happened": _not_happened(f),
            "compensate": _compensate(f),
            "escalate": _escalate(f),
        },
    )


_DISPOSITIONS = {
    "completed": "it happened",
    "retried": "it was retried with the same key",
    "not_happened": "it did not happen",
    "compensated": "it was undone by the tool's inverse",
}
_ESCALATIONS = {
    "conflict": "the receiver holds a different operation under its key",
    "retention": "the receiver's key retention had passed",
    "policy": "the tool's policy asks a person",
    "overdue": "it passed its deadline",
    "unclassified": "the tool has no policy",
}


def status_words(*, state: str, disposition: str = "", resolved_by: str = "", automatic: bool = False, escalation_reason: str = "") -> str:
    """A call's state as a sentence: ``Resolved: it did not happen (decided by oncall). It had been
    escalated because the receiver holds a different operation under its key.``"""
    why = _ESCALATIONS.get(escalation_reason, escalation_reason.replace("_", " "))
    if state == "resolved":
        text = "Resolved: " + _DISPOSITIONS.get(disposition, disposition.replace("_", " ") or "settled")
        if resolved_by:
            text += " (settled by a rule)" if automatic else f" (decided by {resolved_by})"
        text += "."
        if escalation_reason:
            text += f" It had been escalated because {why}."
        return text
    text = {"escalated": "Escalated, waiting for a person", "open": "Open: no reconciliation attempt yet", "reconciling": "Reconciling: no answer that settles it yet", "in_flight": "In flight: its agent may still complete it"}.get(state, state)
    if state == "escalated" and escalation_reason:
        text += f": {why}"
    return text + "."
