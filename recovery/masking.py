"""Masking of sensitive values, next to the policies that name them.

Tool policies list their sensitive argument names. Everything shown or returned to someone without
the sensitive-data permission goes through ``value_mask``, which hides sensitive data twice over:

- by key: every entry whose key is a sensitive field is replaced by the mask, in structures and in
  JSON kept as text (a raw response body, a call's signature), which is decoded first so that an
  escape such as ``"\\u0061ccount"`` cannot hide the key;
- by value: every value of a sensitive field known for the runs shown (the calls' arguments and
  what lookups observed for those fields) is replaced wherever it occurs in any string, so a
  receiver's HTML page saying ``account 4020-7777-SECRET is locked`` is masked too.

- a call's key, in a run without a key secret (schema versions 1 and 2, and their imports), when
  its arguments hold a sensitive value: such a key is ``sha256(run_id | signature)`` (reckon_client.identity),
  so whoever sees it and the masked arguments could test guesses of the value against it. It counts
  as one of the run's sensitive values, masked wherever it occurs (a prefix too, see
  ``key_shown``), recorded when shown whole. A run with a key secret keys its calls with it, and
  its keys give nothing away.

A value of ``SUBSTRING_MIN`` characters or more is masked wherever it occurs, inside longer words
included, ignoring case; a shorter one only where it stands alone as a token (not touching a
letter or digit), so a two-digit sensitive value does not blank every number on a page. Numbers
are matched by their text. Who gets which mask is decided above, in ``access.masking``; which
values belong to a screen, by the selectors that build it (``run_sensitive_values``).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from functools import lru_cache
from typing import Any

from django.db import connection

from recovery.models import ToolPolicy
from runs.identity import KEY_SECRET_FIELD, KEY_SECRET_WITHHELD

MASK = KEY_SECRET_WITHHELD  # "[masked]"

# Fields masked for every person whatever their permissions, and never offered for reveal: a run's
# key secret (runs.identity) is read only by the run's own agents (access.masking).
NEVER_REVEALED = frozenset({KEY_SECRET_FIELD})
SUBSTRING_MIN = 4  # values this long or longer are masked inside any text; shorter ones as whole tokens only


def sensitive_fields() -> frozenset[str]:
    """Every argument name any tool policy marks sensitive, and the run's key secret (NEVER_REVEALED).

    The union is applied to every payload, whichever tool it belongs to: evidence and conflict
    comparisons do not always name their tool, and masking a field of a tool that did not ask for it
    costs a click on "reveal", whereas missing one leaks it.
    """
    names: set[str] = set(NEVER_REVEALED)
    for fields in ToolPolicy.objects.values_list("sensitive_fields", flat=True):
        names.update(fields or ())
    return frozenset(names)


# What the append path seals (runs.canonical): the same names, read at most every few seconds, so an
# append does not query the policies. A policy stored in this process is seen at once
# (``sealed_fields_forget``); other processes see it within SEALED_TTL_S. A value appended meanwhile
# unsealed is still masked in a bundle: its event is then withheld, shown by its hash alone (runs.verify).
SEALED_TTL_S = 5.0
_sealed: tuple[float, frozenset[str]] = (-1e9, frozenset())


def sealed_fields() -> frozenset[str]:
    """``sensitive_fields()``, cached for SEALED_TTL_S: the provider the store's sealing calls."""
    global _sealed
    at, names = _sealed
    now = time.monotonic()
    if now - at > SEALED_TTL_S:
        names = sensitive_fields()
        _sealed = (now, names)
    return names


def sealed_fields_forget() -> None:
    global _sealed
    _sealed = (-1e9, frozenset())


# --- the values ----------------------------------------------------------------------------------


def _text_forms(value: Any) -> Iterable[str]:
    """The strings a leaf value may appear as in text (booleans and nulls are never secrets)."""
    if isinstance(value, bool) or value is None:
        return ()
    if isinstance(value, str):
        return (value.strip(),) if value.strip() and value != MASK else ()
    if isinstance(value, (int, float)):
        return (json.dumps(value),)
    return ()


_decoder = json.JSONDecoder()
_OPEN = re.compile(r"[\[{]")
# The work of finding JSON in a text is bounded, so a hostile text (a megabyte of brackets, of
# unclosed arrays) costs a few reads of it, not one per bracket: at most JSON_TRIES_MAX attempts to
# decode, reading at most JSON_READ_FACTOR times the text's length between them. Text left unread
# then, or JSON nested deeper than the stack, is "doubtful": masked whole if it names a sensitive
# field or holds a \u escape that could spell one (``_str_mask``).
JSON_TRIES_MAX = 1000
JSON_READ_FACTOR = 2


def _json_values(text: str) -> tuple[list[tuple[int, Any, int]], bool]:
    """Every JSON object or array kept in ``text``, left to right, as (where it starts, what it
    decodes to, where it ends), and whether some text could not be judged (the bounds above, or
    nesting past the stack). The text between the values is not JSON, or JSON cut off."""
    found: list[tuple[int, Any, int]] = []
    budget = JSON_READ_FACTOR * len(text) + 4096
    m = _OPEN.search(text)
    tries = 0
    while m is not None:
        start = m.start()
        if tries == JSON_TRIES_MAX or budget <= 0:
            return found, True
        tries += 1
        try:
            inner, end = _decoder.raw_decode(text, start)
        except ValueError as exc:  # not JSON from here: read up to where it failed
            budget -= getattr(exc, "pos", len(text)) - start
            m = _OPEN.search(text, start + 1)
            continue
        except RecursionError:  # nested deeper than the stack
            return found, True
        budget -= end - start
        found.append((start, inner, end))
        m = _OPEN.search(text, end)
    return found, False


def sensitive_values(value: Any, fields: frozenset[str]) -> set[str]:
    """Every value found under a sensitive key anywhere in ``value`` (JSON text decoded), as text."""
    out: set[str] = set()
    if not fields:
        return out

    def leaves(v: Any) -> None:
        if isinstance(v, dict):
            for x in v.values():
                leaves(x)
        elif isinstance(v, list):
            for x in v:
                leaves(x)
        else:
            out.update(_text_forms(v))

    def walk(v: Any) -> None:
        if isinstance(v, dict):
            for k, x in v.items():
                if k in fields:
                    leaves(x)
                else:
                    walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)
        elif isinstance(v, str) and ("{" in v or "[" in v):
            for _, inner, _ in _json_values(v)[0]:
                walk(inner)

    try:
        walk(value)
    except RecursionError:  # JSON text nested in JSON text past the stack: masked whole when shown (_str_mask)
        pass
    return out


def _event_values(run_id: str, type_: str, payload: Any, fields: frozenset[str], legacy: bool) -> set[str]:
    """The sensitive values one event holds: under sensitive keys, and, for a call started with a
    sensitive argument in a run without a key secret (``legacy``), the call's key (see above)."""
    found = sensitive_values(payload, fields)
    if legacy and found and type_ == "tool_call_started" and isinstance(payload, dict) and sensitive_values(payload.get("arguments"), fields):
        from runs.calls import start_key

        try:
            found.add(start_key(run_id, payload))
        except (TypeError, ValueError):  # arguments the signature cannot encode: no key was computed from them either
            pass
    return found


def _legacy_runs(run_ids: Iterable[str]) -> set[str]:
    """Of ``run_ids``, the runs whose run_started holds no key secret (their keys are legacy)."""
    from runs.models import Event

    ids = set(run_ids)
    if not ids:
        return set()
    # The payload column is json, not jsonb, on PostgreSQL (kept as written): asked here, not in SQL.
    firsts = Event.objects.filter(run_id__in=ids, seq=1, type="run_started").values_list("run_id", "payload")
    return ids - {run_id for run_id, payload in firsts if isinstance(payload, dict) and payload.get(KEY_SECRET_FIELD)}


# Per run: (created_at, last seq read, values, legacy keys). The log is append-only, so a run's
# values only grow and a later read need fetch just the events after the last seq read;
# created_at tells a run deleted and imported again from the one cached. Bounded, least recently
# used out first.
_RUN_VALUES: OrderedDict[tuple[str, frozenset[str]], tuple[Any, int, frozenset[str], bool]] = OrderedDict()
_RUN_VALUES_MAX = 4096
_lock = threading.Lock()


CHUNK = 2000  # events: the most one statement of ``_named_events`` reads


def _named_events(ranges: dict[str, tuple[int, int]], fields: frozenset[str]) -> Iterator[tuple[str, str, str]]:
    """(run id, type, stored text) of the events in ``ranges`` (run id: (after, upto], seqs) whose
    stored text could name a sensitive key; only those are decoded. A key is written as '"name' in
    the payload and as '\\"name' in JSON kept as text; any other spelling of it needs a \\u
    escape, so text holding one is read too. The database tests the text as it reads the rows (in
    C), so neither a long run's first read nor a batch of model turns after it costs a decode of
    every event. Written out rather than through the ORM, whose compiling of twenty such
    conditions cost more than the read. One statement reads at most ``CHUNK`` events' seqs (the
    ranges cut into pieces of that many, and pieces gathered up to it), so a long run's first read
    holds one such piece's rows at a time, and a commit's few new events are one statement."""
    needles = ["\\u", *(f'"{f}' for f in sorted(fields))]
    named = " OR ".join(["CAST(payload AS text) LIKE %s ESCAPE '\\'"] * len(needles))
    patterns = ["%" + n.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%" for n in needles]
    pieces = [(run_id, lo, min(lo + CHUNK, upto)) for run_id, (after, upto) in ranges.items() for lo in range(after, upto, CHUNK)]
    i = 0
    while i < len(pieces):
        first, span = i, 0
        while i < len(pieces) and (i == first or span + pieces[i][2] - pieces[i][1] <= CHUNK):
            span += pieces[i][2] - pieces[i][1]
            i += 1
        where = " OR ".join(["(run_id = %s AND seq > %s AND seq <= %s)"] * (i - first))
        with connection.cursor() as cur:
            cur.execute(f"SELECT run_id, type, CAST(payload AS text) FROM reckon_event WHERE ({where}) AND ({named})", [v for piece in pieces[first:i] for v in piece] + patterns)
            rows = cur.fetchall()
        yield from rows


def run_sensitive_values(*, run_ids: Iterable[str], fields: frozenset[str]) -> frozenset[str]:
    """The sensitive values of every run in ``run_ids``: whatever any of their events holds under a
    sensitive key (calls' arguments, lookups' observations and comparisons, JSON results), and the
    legacy keys of calls made with such a value (above).

    Empty when nothing is to be masked (``fields`` empty). Two queries at most whatever the number
    of runs: their fence rows, then, of the events none of this process's earlier reads has seen,
    those whose stored text could name a sensitive field (``_named_events``); and a third the first
    time a run is read, for whether its run_started holds a key secret.
    """
    found = runs_sensitive_values(run_ids=run_ids, fields=fields)
    return frozenset().union(*found.values()) if found else frozenset()


def runs_sensitive_values(*, run_ids: Iterable[str], fields: frozenset[str]) -> dict[str, frozenset[str]]:
    """``run_sensitive_values`` run by run, with the same queries: the values of each
    run of ``run_ids`` that exists, by run id (for lines about several runs, each masked by its own
    run's values, as the decision log writes them)."""
    from runs.models import Run
    from runs.store import payload_loads

    ids = sorted(set(run_ids))
    if not fields or not ids:
        return {}
    runs = {r: (created, last) for r, created, last in Run.objects.filter(run_id__in=ids).values_list("run_id", "created_at", "last_seq")}
    values: dict[str, frozenset[str]] = {}
    stale: dict[str, tuple[Any, int, set[str]]] = {}
    legacy: dict[str, bool] = {}
    with _lock:
        for run_id, (created, last) in runs.items():
            cached = _RUN_VALUES.get((run_id, fields))
            if cached is not None and cached[0] == created and cached[1] >= last:
                _RUN_VALUES.move_to_end((run_id, fields))
                values[run_id] = cached[2]
            elif cached is not None and cached[0] == created:
                stale[run_id] = (created, cached[1], set(cached[2]))
                legacy[run_id] = cached[3]
            else:
                stale[run_id] = (created, 0, set())
    if stale:
        unknown = [r for r in stale if r not in legacy]
        if unknown:  # first read of these runs: does each key its calls with a secret?
            old = _legacy_runs(unknown)
            legacy |= {r: r in old for r in unknown}
        upto = {run_id: runs[run_id][1] for run_id in stale}  # read as far as the fence rows say
        for run_id, type_, text in _named_events({r: (after, upto[r]) for r, (_, after, _) in stale.items()}, fields):
            stale[run_id][2].update(_event_values(run_id, type_, payload_loads(text), fields, legacy[run_id]))
        # Every event up to the last seq the fence rows gave has been considered.
        stale = {run_id: (created, max(after, upto[run_id]), found) for run_id, (created, after, found) in stale.items()}
    if stale:
        with _lock:
            for run_id, (created, after, found) in stale.items():
                values[run_id] = frozen = frozenset(found)
                _RUN_VALUES[(run_id, fields)] = (created, after, frozen, legacy[run_id])
                _RUN_VALUES.move_to_end((run_id, fields))
            while len(_RUN_VALUES) > _RUN_VALUES_MAX:
                _RUN_VALUES.popitem(last=False)
    return values


# --- masking -------------------------------------------------------------------------------------


@lru_cache(maxsize=256)
def _pattern(values: frozenset[str]) -> re.Pattern | None:
    """One regular expression for every value: longest first, so a value containing another is
    masked whole; short ones only as whole tokens."""
    parts = []
    for v in sorted(values, key=lambda s: (-len(s), s)):
        if len(v) >= SUBSTRING_MIN:
            parts.append(re.escape(v))
        else:
            parts.append(r"(?<![0-9A-Za-z])" + re.escape(v) + r"(?![0-9A-Za-z])")
    return re.compile("|".join(parts), re.IGNORECASE) if parts else None


def key_shown(key: str, values: frozenset[str]) -> str:
    """A call's key as a reader masked by ``values`` sees it: the mask when it is one of them (a
    legacy key of a call with a sensitive argument), else the key. For a screen that shows a key
    shortened: a prefix would let guesses be tested as well as the whole key does."""
    return MASK if key and key in values else key


def text_mask(text: str, values: frozenset[str]) -> str:
    """``text`` with every occurrence of a sensitive value replaced by the mask (the rule above)."""
    pattern = _pattern(values) if values else None
    if pattern is None or not text or text == MASK:
        return text
    return pattern.sub(MASK, text)


def value_mask(value: Any, fields: frozenset[str], values: frozenset[str] = frozenset()) -> Any:
    """``value`` as someone without the sensitive-data permission may see it: every entry whose key
    is in ``fields`` replaced by the mask, recursively and inside JSON kept as text, then every
    occurrence of one of ``values`` in any string (keys included) masked too.

    With ``fields`` empty the reader sees everything and ``value`` is returned as it is.
    """
    if not fields:
        return value
    pattern = _pattern(frozenset(values)) if values else None
    return _mask(value, fields, pattern)


def _mask(value: Any, fields: frozenset[str], pattern: re.Pattern | None) -> Any:
    if isinstance(value, dict):
        return {_str_mask(k, fields, pattern) if pattern is not None else k: (MASK if k in fields and v is not None else _mask(v, fields, pattern)) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask(v, fields, pattern) for v in value]
    if isinstance(value, str):
        return _str_mask(value, fields, pattern)
    if pattern is not None and isinstance(value, (int, float)) and not isinstance(value, bool) and pattern.fullmatch(json.dumps(value)):
        return MASK
    return value


def _str_mask(value: str, fields: frozenset[str], pattern: re.Pattern | None) -> str:
    if value == MASK:
        return value
    if "{" not in value and "[" not in value:
        return pattern.sub(MASK, value) if pattern is not None else value
    # JSON kept as text would carry the field in the clear: a raw response body in evidence, a
    # call's signature ("tool:{...canonical arguments...}"), a message quoting one or more JSON
    # documents. Each is decoded (escapes cannot hide a key), masked by key and by value, and
    # written back canonically when anything was hidden. The text around them is masked by value;
    # if it still names a sensitive field (JSON cut off, or past the attempts), all of it is masked.
    parts: list[str | None] = []
    at = 0
    found, doubtful = _json_values(value)
    for start, inner, end in found:
        parts.append(_gap_mask(value[at:start], fields, pattern, doubtful))
        try:
            shown = _mask(inner, fields, pattern)
        except RecursionError:
            return MASK  # JSON text in JSON text nested past the stack: not shown at all
        parts.append(json.dumps(shown, ensure_ascii=False, sort_keys=True, separators=(",", ":")) if shown != inner else _gap_mask(value[start:end], frozenset(), pattern, False))
        at = end
    parts.append(_gap_mask(value[at:], fields, pattern, doubtful))
    return MASK if None in parts else "".join(parts)


def _gap_mask(text: str, fields: frozenset[str], pattern: re.Pattern | None, doubtful: bool) -> str | None:
    """Text that is not JSON, masked by value; None (mask it all) if it names a sensitive field, or
    if it may hold JSON left unread (``doubtful``) and a ``\\u`` escape that could spell one."""
    if any(f'"{f}"' in text for f in fields) or (doubtful and fields and "\\u" in text):
        return None
    return pattern.sub(MASK, text) if pattern is not None and text else text


def value_at(value: Any, path: str) -> Any:
    """The value at a dotted path (``arguments.account``, ``tool_calls.0.arguments.account``)."""
    for part in path.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            raise KeyError(path)
    return value


def masked_paths(value: Any, fields: frozenset[str], prefix: str = "") -> list[str]:
    """Dotted paths of the entries ``value_mask`` would hide by key: what a reveal button may name."""
    out: list[str] = []
    if isinstance(value, dict):
        for k, v in value.items():
            p = f"{prefix}{k}"
            if k in fields and v is not None:
                if k not in NEVER_REVEALED:
                    out.append(p)
            else:
                out.extend(masked_paths(v, fields, p + "."))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out.extend(masked_paths(v, fields, f"{prefix}{i}."))
    return out
