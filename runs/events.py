"""The one registry of event types.

Every type has a stable string name (it is stored in every row and every exported file, so a name
is never reused or renamed) and is declared either state-changing, with a fold rule in
``runs/fold.py``, or record-only, with a deliberate no-op there. The module refuses to import when
a type is in neither set or in both, so a new member cannot silently fall through the fold.

This module imports nothing from Django: the fold and the importer use it as plain Python.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from enum import Enum

from runs.errors import WriterRefused
from runs.identity import key_secret_problem

# The newest event schema version this release can read and the one it writes.
#   1: the reference format (docs/formats.md, The run log).
#   2: completions carry source (live, reconciliation, retry, operator); starts and completions carry
#      tenant and operation_id; the recovery types exist (docs/formats.md, Event types). runs/upcasters.py
#      reads version 1 as version 2. A change of meaning (not a new field with a default) is not an
#      upcast: it needs a data migration and a new version, see docs/schema-versions.md.
#   3: run_started carries the run's key secret (``key_secret``, filled by the store when a writer
#      leaves it out), and a key is computed from it (reckon_client/identity.py); an operation id a writer
#      gives is part of the key. Older versions read as version 3 unchanged: a run without a secret
#      keeps the version 1 formula.
#   4: freshness: run_resumed may list ``stale_observations`` (completed reads older than their
#      tool's fresh_for when the run was opened), and a start that reads one again names it in
#      ``refreshes`` ({idempotency_key, seq}) with an operation id derived from that seq. Both are
#      optional: versions 1 to 3 read as version 4 unchanged.
CURRENT_SCHEMA_VERSION = 4

# The version from which run_started carries the run's key secret.
KEY_SECRET_SINCE = 3


class EventType(str, Enum):
    RUN_STARTED = "run_started"
    USER_MESSAGE = "user_message"
    MODEL_TURN = "model_turn"
    TOOL_CALL_STARTED = "tool_call_started"
    TOOL_CALL_COMPLETED = "tool_call_completed"
    APPROVAL_REQUESTED = "approval_requested"
    APPROVAL_DECIDED = "approval_decided"
    GUARDRAIL_TRIGGERED = "guardrail_triggered"
    CONTEXT_COMPACTED = "context_compacted"
    MEMORY_WRITTEN = "memory_written"
    RUN_FINISHED = "run_finished"
    # Version 2: recovery facts Reckon itself writes (docs/recovery.md).
    RUN_RESUMED = "run_resumed"
    TOOL_CALL_UNCERTAIN = "tool_call_uncertain"
    RECONCILIATION_ATTEMPTED = "reconciliation_attempted"
    TOOL_CALL_RESOLVED = "tool_call_resolved"
    RUN_PAUSED = "run_paused"
    OPERATOR_NOTE = "operator_note"


STATE_CHANGING: frozenset[EventType] = frozenset(
    {
        EventType.RUN_STARTED,
        EventType.USER_MESSAGE,
        EventType.MODEL_TURN,
        EventType.TOOL_CALL_STARTED,  # opens a call; an unmatched start is an uncertain call
        EventType.TOOL_CALL_COMPLETED,
        EventType.APPROVAL_REQUESTED,  # a pending approval pauses the run for a person
        EventType.APPROVAL_DECIDED,
        EventType.CONTEXT_COMPACTED,
        EventType.MEMORY_WRITTEN,
        EventType.RUN_FINISHED,
        EventType.RUN_RESUMED,  # counts resumptions
        EventType.TOOL_CALL_RESOLVED,  # closes an uncertain start that no completion closed
        EventType.RUN_PAUSED,  # stops the run (e.g. a conflicting effect) until a person resumes it
    }
)

RECORD_ONLY: frozenset[EventType] = frozenset(
    {
        # A guardrail trip is an audit fact: what it redacted is already in the content the
        # model saw, so the run's state does not change.
        EventType.GUARDRAIL_TRIGGERED,
        # Recovery bookkeeping: the recovery projection reads these; the run's own state (its
        # context, its completed calls) changes only through the completion or resolution they lead to.
        EventType.TOOL_CALL_UNCERTAIN,
        EventType.RECONCILIATION_ATTEMPTED,
        EventType.OPERATOR_NOTE,  # a person's note on a call, kept in the run's history for audit
    }
)

# Who writes each type. Agents write what happened in their run, through the append endpoint and the
# client; a person's decisions, claims and notes are written only by the decision services
# (recovery.decisions, access.assignment), with the signed-in person (or the deciding token) as
# ``by``; Reckon's own recovery facts (detection, reconciliation, its resolutions and pauses) only by
# Reckon. The append endpoint (api.runs) and the in-process transport (runs.client) refuse every type
# that is not an agent's, by this table; the importer keeps every type, a recorded history.
AGENT, PERSON, RECKON = "agent", "person", "reckon"
WRITER: dict[EventType, str] = {
    EventType.RUN_STARTED: AGENT,
    EventType.USER_MESSAGE: AGENT,
    EventType.MODEL_TURN: AGENT,
    EventType.TOOL_CALL_STARTED: AGENT,
    EventType.TOOL_CALL_COMPLETED: AGENT,  # source "live" only: see AGENT_COMPLETION_SOURCES
    EventType.APPROVAL_REQUESTED: AGENT,  # an agent asks; Reckon asks too when it escalates a call
    EventType.APPROVAL_DECIDED: PERSON,
    EventType.GUARDRAIL_TRIGGERED: AGENT,
    EventType.CONTEXT_COMPACTED: AGENT,
    EventType.MEMORY_WRITTEN: AGENT,
    EventType.RUN_FINISHED: AGENT,
    EventType.RUN_RESUMED: AGENT,  # the agent that opens the run again (reckon_client.open_run)
    EventType.TOOL_CALL_UNCERTAIN: RECKON,
    EventType.RECONCILIATION_ATTEMPTED: RECKON,
    EventType.TOOL_CALL_RESOLVED: RECKON,  # for a person's decision or for reconciliation's finding
    EventType.RUN_PAUSED: RECKON,
    EventType.OPERATOR_NOTE: PERSON,  # notes, claims, assignments, releases
}
# A completion an agent writes is its own call's live result; the other sources are what recovery
# found (reconciliation, retry) or what a person recorded (operator).
AGENT_COMPLETION_SOURCES = ("live",)
AGENT_TYPES: frozenset[str] = frozenset(t.value for t, w in WRITER.items() if w == AGENT)

# The agent's own work belongs to a run that is still going: once the run has finished, the store
# refuses it (RunFinished), so an agent that opens a finished run again cannot run a tool a second
# time under it. Recovery's and people's records about the run's calls (uncertain calls, attempts,
# retries, escalations, decisions, notes, resolutions) still follow its end. Some types are the
# agent's whatever they hold; for the others, the payload says whose the event is.
LIVE_ONLY: frozenset[str] = frozenset(
    t.value for t in (EventType.RUN_STARTED, EventType.USER_MESSAGE, EventType.MODEL_TURN, EventType.GUARDRAIL_TRIGGERED, EventType.CONTEXT_COMPACTED, EventType.MEMORY_WRITTEN, EventType.RUN_RESUMED)
)
LIVE_ONLY_WHEN: dict[str, Callable[[dict], bool]] = {
    EventType.TOOL_CALL_STARTED.value: lambda p: p.get("retry_of") is None,  # not Reckon's retry of a call
    EventType.TOOL_CALL_COMPLETED.value: lambda p: p.get("source", "live") in AGENT_COMPLETION_SOURCES,
    EventType.APPROVAL_REQUESTED.value: lambda p: not p.get("idempotency_key"),  # the agent's question before a call
}


def live_run_only(type_name: str, payload: dict) -> bool:
    """Whether an event of ``type_name`` with ``payload`` is the agent's own work, which a finished
    run no longer takes (``LIVE_ONLY``, ``LIVE_ONLY_WHEN``)."""
    when = LIVE_ONLY_WHEN.get(type_name)
    return type_name in LIVE_ONLY or (when is not None and when(payload))


def agent_write_problem(type_name: object, payload: object) -> str | None:
    """Why an agent may not write an event of ``type_name`` with ``payload``, or None when it may.
    An unknown type is the store's to refuse (422), not this rule's."""
    if type_name in AGENT_TYPES:
        if type_name == EventType.TOOL_CALL_COMPLETED.value and isinstance(payload, dict):
            source = payload.get("source", "live")
            if source not in AGENT_COMPLETION_SOURCES:
                return f"a tool_call_completed with source {source!r} is recovery's or a person's record, not an agent's: an agent writes source 'live'"
        return None
    if not isinstance(type_name, str) or type_name not in _BY_NAME:
        return None
    writer = WRITER[_BY_NAME[type_name]]
    how = "a person's fact, written only through the decision endpoints (/api/uncertain-calls/{pk}/decisions, /claim) or the console, as the signed-in person" if writer == PERSON else "written only by Reckon itself"
    return f"{type_name} is {how}, never through the append endpoint"


def agent_events_check(events: Iterable[tuple[object, object]]) -> None:
    """WriterRefused naming the first of ``events`` ((type, payload) pairs) an agent may not write."""
    for i, (type_name, payload) in enumerate(events):
        problem = agent_write_problem(type_name, payload)
        if problem is not None:
            raise WriterRefused(f"event {i}: {problem}", type_name=str(type_name))


# The version that introduced each type: an event cannot claim an older version than its type.
INTRODUCED_IN: dict[EventType, int] = {
    EventType.RUN_RESUMED: 2,
    EventType.TOOL_CALL_UNCERTAIN: 2,
    EventType.RECONCILIATION_ATTEMPTED: 2,
    EventType.TOOL_CALL_RESOLVED: 2,
    EventType.RUN_PAUSED: 2,
    EventType.OPERATOR_NOTE: 2,
}

# Payload keys an event must carry for the fold to apply it exactly; other keys are kept as they are.
REQUIRED_FIELDS: dict[EventType, tuple[str, ...]] = {
    EventType.RUN_STARTED: ("run_id",),
    EventType.USER_MESSAGE: ("content",),
    EventType.MODEL_TURN: (),
    EventType.TOOL_CALL_STARTED: ("call_id", "name", "arguments"),
    EventType.TOOL_CALL_COMPLETED: ("call_id", "name", "content"),
    EventType.APPROVAL_REQUESTED: ("call_id",),
    EventType.APPROVAL_DECIDED: ("call_id", "approved"),
    EventType.GUARDRAIL_TRIGGERED: ("rule",),
    EventType.CONTEXT_COMPACTED: ("summary", "kept"),
    EventType.MEMORY_WRITTEN: ("key",),
    EventType.RUN_FINISHED: ("outcome",),
    EventType.RUN_RESUMED: ("epoch", "holder", "after_seq"),
    EventType.TOOL_CALL_UNCERTAIN: ("call_id", "idempotency_key", "start_seq", "reason"),
    EventType.RECONCILIATION_ATTEMPTED: ("idempotency_key", "attempt", "outcome"),
    EventType.TOOL_CALL_RESOLVED: ("idempotency_key", "disposition"),
    EventType.RUN_PAUSED: ("reason",),
    EventType.OPERATOR_NOTE: ("by", "text"),
}

COMPLETION_SOURCES = ("live", "reconciliation", "retry", "operator")
RESOLUTION_DISPOSITIONS = ("completed", "retried", "not_happened", "compensated")

TERMINAL: frozenset[EventType] = frozenset({EventType.RUN_FINISHED})

_BY_NAME: dict[str, EventType] = {t.value: t for t in EventType}


class UnknownEventType(ValueError):
    """A type name that is not in the registry: never folded, never stored."""


def event_type(name: object) -> EventType:
    """The registered type for ``name``, or UnknownEventType naming it."""
    try:
        return _BY_NAME[name]  # type: ignore[index]
    except (KeyError, TypeError):
        raise UnknownEventType(f"unknown event type {name!r}") from None


def version_problem(type_: EventType, v: object, payload: dict) -> str | None:
    """Why ``v`` is not a version this release can store for this type and payload, or None."""
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        return f"schema version {v!r} is not a positive integer"
    if v > CURRENT_SCHEMA_VERSION:
        return f"schema version {v} is newer than this reader knows (up to {CURRENT_SCHEMA_VERSION})"
    if v < INTRODUCED_IN.get(type_, 1):
        return f"{type_.value} exists from schema version {INTRODUCED_IN[type_]}, not {v}"
    if v >= 2 and type_ is EventType.TOOL_CALL_COMPLETED and payload.get("source", "live") not in COMPLETION_SOURCES:
        return f"source {payload.get('source')!r} is not one of {', '.join(COMPLETION_SOURCES)}"
    if type_ is EventType.RUN_STARTED and "key_secret" in payload:
        if v < KEY_SECRET_SINCE:
            return f"key_secret exists from schema version {KEY_SECRET_SINCE}, not {v}"
        return key_secret_problem(payload["key_secret"])
    if type_ is EventType.TOOL_CALL_RESOLVED and payload.get("disposition") not in RESOLUTION_DISPOSITIONS:
        return f"disposition {payload.get('disposition')!r} is not one of {', '.join(RESOLUTION_DISPOSITIONS)}"
    return None


# The types ``version_problem`` checks for nothing but the range of versions, by name: (required
# payload keys, first version). An event of one of them whose version is an int in that range and
# whose payload holds those keys passes both checks above, so a writer of many events (the append
# path, the importer) may test this alone and call the two functions only when it fails.
PLAIN_CHECKS: dict[str, tuple[frozenset[str], int]] = {
    t.value: (frozenset(REQUIRED_FIELDS[t]), INTRODUCED_IN.get(t, 1)) for t in EventType if t not in (EventType.RUN_STARTED, EventType.TOOL_CALL_COMPLETED, EventType.TOOL_CALL_RESOLVED)
}


def missing_fields(type_: EventType, payload: dict) -> list[str]:
    """The required payload keys that ``payload`` lacks, in declaration order."""
    return [k for k in REQUIRED_FIELDS[type_] if k not in payload]


class RegistryIncomplete(Exception):
    """A table keyed by event type (the registry, the fold's rules, the projection's handlers, the
    snapshot format) does not cover what it must. Raised at import, so a process never starts with
    it; a plain exception rather than ``assert``, which ``python -O`` would remove."""


def registry_check(ok: bool, message: str) -> None:
    """Raise RegistryIncomplete with ``message`` unless ``ok``."""
    if not ok:
        raise RegistryIncomplete(message)


def rule_table(name: str, rules: dict, ignored: Iterable[EventType]) -> dict:
    """A table of one handler per event type, keyed by type name, checked complete at import.

    Every registered type has a handler in ``rules`` or is listed in ``ignored`` (deliberately
    nothing to do), never both: a type added to the registry without a decision in every table
    stops the process from starting. The fold's rules and each read model's handlers are such tables.
    """
    ignored = frozenset(ignored)
    every = set(EventType)
    missing = every - set(rules) - ignored
    both = set(rules) & ignored
    registry_check(not missing, f"{name}: event types with neither a handler nor an explicit ignore: {sorted(t.value for t in missing)}")
    registry_check(not both, f"{name}: event types both handled and ignored: {sorted(t.value for t in both)}")
    return {t.value: fn for t, fn in rules.items()}


def registry_complete(state_changing: frozenset, record_only: frozenset, required: dict, writer: dict | None = None) -> None:
    """Every type is classified exactly once and declares its required fields and its writer."""
    every = set(EventType)
    unclassified = every - state_changing - record_only
    both = state_changing & record_only
    registry_check(not unclassified, f"event types neither state-changing nor record-only: {sorted(unclassified)}")
    registry_check(not both, f"event types declared both state-changing and record-only: {sorted(both)}")
    registry_check(set(required) == every, f"event types without required fields: {sorted(every - set(required))}")
    if writer is not None:
        registry_check(set(writer) == every, f"event types without a writer: {sorted(t.value for t in every - set(writer))}")
        registry_check(set(writer.values()) <= {AGENT, PERSON, RECKON}, f"writers must be {AGENT}, {PERSON} or {RECKON}")


registry_complete(STATE_CHANGING, RECORD_ONLY, REQUIRED_FIELDS, WRITER)
# Every type an agent writes says whether a finished run still takes it (run_finished has its own
# rule: a second one is refused).
registry_check(
    AGENT_TYPES - {EventType.RUN_FINISHED.value} == LIVE_ONLY | set(LIVE_ONLY_WHEN),
    f"agent event types not named in LIVE_ONLY or LIVE_ONLY_WHEN: {sorted(AGENT_TYPES - {EventType.RUN_FINISHED.value} - LIVE_ONLY - set(LIVE_ONLY_WHEN))}",
)
