"""The access record's writes: every showing of sensitive values unmasked, by either front end.

One service below the console and the API, so the rule "record it before it is shown" lives once.
The console records a reveal (with the reason the person gave) and an unmasked export; the API
records every read whose answer carries a sensitive value unmasked, naming the route; the commands
that print such values record what they print, naming the command. A read that
shows nothing sensitive unmasked writes nothing: a masked reader, a run without sensitive values,
and an agent's token reading back a run it writes (what it wrote is not news to it).

A record never holds a sensitive value itself: it is shown to people who may not see the values
(the run screen, a masked evidence bundle) and, chained, is never changed after. So each text it
keeps (the reason, the route, every path, the key) is masked by value against the run's sensitive
values before it is written (``record_text``): "checking acct [masked] for ticket T-9",
"state.memory.acme/2026-Q3/[masked]".
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from access.chain import access_chain_append
from access.masking import shown_paths
from access.models import AccessRecord, RunWriter
from access.tokens import Principal
from recovery.masking import run_sensitive_values, sensitive_fields, text_mask
from runs.models import RunTenant

# A record lists at most this many paths, then how many more there were: a 1,000-event page full
# of account numbers is one record saying so, not a megabyte of paths.
MAX_PATHS = 100
MAX_WHY = 2000


@dataclass(frozen=True)
class Shown:
    """One thing an answer shows: a run's event, state or uncertain call, as it is sent."""

    run_id: str
    value: Any
    call_id: str = ""
    idempotency_key: str = ""
    prefix: str = ""  # where ``value`` sits in the answer, prepended to each path


def _actor(who: Principal) -> tuple[str, int | None]:
    kind, _, ident = who.owner.partition(":")
    return kind, int(ident) if ident.isdigit() else None


def _actor_fields(who: Principal) -> dict:
    """Who a record names: kind, id and display name, and for a person signed in through the
    identity provider its issuer and subject too (the one place a record's actor is filled in)."""
    kind, ident = _actor(who)
    named = {"actor_issuer": who.issuer, "actor_subject": who.subject} if who.subject else {}
    return {"actor_kind": kind, "actor_id": ident, "actor_name": who.name[:200], **named}


def _tenants(run_ids: Iterable[str]) -> dict[str, str]:
    out: dict[str, list[str]] = {}
    for run_id, tenant in RunTenant.objects.filter(run_id__in=set(run_ids)).values_list("run_id", "tenant"):
        out.setdefault(run_id, []).append(tenant)
    return {r: ",".join(sorted(t)) for r, t in out.items()}


def _paths(paths: Sequence[str], values: frozenset[str]) -> list[str]:
    kept = [record_text(p, values) for p in paths[:MAX_PATHS]]
    if len(paths) <= MAX_PATHS:
        return kept
    return [*kept, f"(and {len(paths) - MAX_PATHS} more)"]


def record_text(text: str, values: frozenset[str]) -> str:
    """``text`` as an access record keeps it: every sensitive value of the run in it masked, by the
    screens' own rule (recovery.masking.text_mask). A path built from keys that hold a value
    (``state.memory.acme/2026-Q3/4020``) keeps its shape with the value masked."""
    return text_mask(text, values)


def _run_values(run_ids: Iterable[str]) -> frozenset[str]:
    """Every sensitive value of the runs, whoever the record is about: what its texts are masked by."""
    return run_sensitive_values(run_ids=run_ids, fields=sensitive_fields())


def access_record_write(
    *,
    who: Principal,
    front_end: str,
    run_id: str,
    why: str,
    fields: Sequence[str] = (),
    all_fields: bool = False,
    seq: int | None = None,
    call_id: str = "",
    idempotency_key: str = "",
) -> AccessRecord:
    """Record that ``who`` is being shown sensitive values of ``run_id``; call it before showing them.

    If the record cannot be written the exception propagates and the value is not shown.
    """
    if front_end not in AccessRecord.FrontEnd.values:
        raise ValueError(f"front_end must be one of {', '.join(AccessRecord.FrontEnd.values)}, got {front_end!r}")
    values = _run_values([run_id])
    with transaction.atomic():
        record = AccessRecord.objects.create(
            **_actor_fields(who),
            front_end=front_end,
            run_id=run_id,
            call_id=record_text(call_id, values)[:200],
            idempotency_key=record_text(idempotency_key, values)[:200],
            seq=seq,
            fields=_paths(fields, values),
            all_fields=all_fields,
            why=record_text(why, values)[:MAX_WHY],
            tenant=_tenants([run_id]).get(run_id, ""),
        )
        access_chain_append([record])
    return record


def unmasked_reads_record(*, who: Principal, mask: frozenset[str], route: str, shown: Sequence[Shown], front_end: str = AccessRecord.FrontEnd.API) -> list[AccessRecord]:
    """Record each item of an answer that carries sensitive values unmasked, before it is sent: an
    API answer, or what a command prints (``front_end``).

    ``mask`` is what the answer was masked with (``access.masking.mask_fields``) and ``shown`` is
    the answer as sent. What counts is what it shows beyond a fully masked answer: a reader whose
    mask covers every sensitive field was shown nothing, and nothing is written. One record per
    run, call or state shown with sensitive values, written in one statement.
    """
    if not shown:
        return []
    items = list(shown)
    kind, ident = _actor(who)
    if kind == "token" and "append" in who.scopes:
        own = set(RunWriter.objects.filter(token_id=ident, run_id__in={s.run_id for s in items}).values_list("run_id", flat=True))
        items = [s for s in items if s.run_id not in own]
        if not items:
            return []
    fields = sensitive_fields()
    if not fields - mask:
        return []
    # The values of the runs shown, as the masking of the same answer for a masked reader uses them:
    # a value quoted in raw text (an error page) is a disclosure as much as one under its key.
    fields |= mask
    values = run_sensitive_values(run_ids={s.run_id for s in items}, fields=fields)
    found = [(s, [s.prefix + p for p in shown_paths(s.value, fields, values)]) for s in items]
    found = [(s, paths) for s, paths in found if paths]
    if not found:
        return []
    tenants = _tenants(s.run_id for s, _ in found)
    records = [
        AccessRecord(
            **_actor_fields(who),
            front_end=front_end,
            run_id=s.run_id,
            call_id=record_text(s.call_id, values)[:200],
            idempotency_key=record_text(s.idempotency_key, values)[:200],
            fields=_paths(paths, values),
            why=record_text(route, values)[:MAX_WHY],
            tenant=tenants.get(s.run_id, ""),
        )
        for s, paths in found
    ]
    with transaction.atomic():
        written = AccessRecord.objects.bulk_create(records)
        access_chain_append(written)
    return written


def run_writer_note(*, who: Principal, run_id: str) -> None:
    """Remember that token ``who`` holds (or held) ``run_id``'s lease: the run is its agent's own."""
    kind, ident = _actor(who)
    if kind == "token" and ident is not None:
        RunWriter.objects.get_or_create(token_id=ident, run_id=run_id)


def command_principal(by: str) -> Principal:
    """Who runs a command that prints or writes sensitive values: ``by`` (its ``--by``), or the
    operating system's user name, or "manage.py" where there is none."""
    import getpass

    if not by:
        try:
            by = f"{getpass.getuser()} (manage.py)"
        except (KeyError, OSError):
            by = "manage.py"
    return Principal(kind="user", name=by[:200], owner="user:", scopes=frozenset())
