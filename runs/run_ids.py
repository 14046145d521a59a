"""What a run id may be: one rule for every way a run enters Reckon (the importer's file names,
the HTTP API's paths and the agent client).

A run id names a file (``<run_id>.jsonl``), a URL path segment and a download's file name, so it is
kept to characters that are safe in all three: ASCII letters and digits, then also ``.``, ``_``,
``:`` and ``-``, 1 to 200 characters in all. It starts with a letter or digit, so ``..``, ``.hidden``
and ``-option`` are never run ids.
"""

from __future__ import annotations

import re

RUN_ID_MAX = 200
RUN_ID_RULE = "1 to 200 characters: ASCII letters, digits, '.', '_', ':' and '-', starting with a letter or digit"
# The rule as a regular expression, anchored, in the syntax both Python and JSON Schema (ECMA-262)
# read: the API's OpenAPI document states it as the run id's pattern (api/openapi_rules.py).
RUN_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$"
_RUN_ID = re.compile(RUN_ID_PATTERN.removeprefix("^").removesuffix("$"))


class InvalidRunId(ValueError):
    """A value that is not a run id; the message quotes it (shortened) and states the rule."""


def run_id_problem(value: object) -> str | None:
    """None for a valid run id, else a sentence saying what is wrong with ``value``."""
    if not isinstance(value, str):
        return f"a run id is a string, got {type(value).__name__}"
    if _RUN_ID.fullmatch(value):
        return None
    shown = value if len(value) <= 60 else value[:60] + "..."
    return f"run id {shown!r} is not valid: a run id is {RUN_ID_RULE}"


def run_id_check(value: object) -> str:
    """``value`` when it is a valid run id, else InvalidRunId saying why."""
    problem = run_id_problem(value)
    if problem:
        raise InvalidRunId(problem)
    return value  # type: ignore[return-value]
