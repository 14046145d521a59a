"""Masking of sensitive argument fields, next to the policies that name them.

Tool policies list their sensitive argument names; every payload shown to someone without the
sensitive-data permission goes through ``value_mask`` with the union of those names. Who gets
which mask is decided above, in ``access.masking``.
"""

from __future__ import annotations

import json
from typing import Any

from recovery.models import ToolPolicy
from runs.identity import KEY_SECRET_FIELD, KEY_SECRET_WITHHELD

MASK = KEY_SECRET_WITHHELD  # "[masked]"

# Fields masked for every person whatever their permissions, and never offered for reveal: a run's
# key secret (runs.identity) is read only by the run's own agents (access.masking).
NEVER_REVEALED = frozenset({KEY_SECRET_FIELD})


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


def value_mask(value: Any, fields: frozenset[str]) -> Any:
    """``value`` with every dict entry whose key is in ``fields`` replaced by the mask, recursively."""
    if not fields:
        return value
    if isinstance(value, dict):
        return {k: (MASK if k in fields and v is not None else value_mask(v, fields)) for k, v in value.items()}
    if isinstance(value, list):
        return [value_mask(v, fields) for v in value]
    if isinstance(value, str) and any(f'"{f}"' in value for f in fields):
        # JSON kept as text would carry the field in the clear: a raw response body in evidence, or
        # a call's signature ("tool:{...canonical arguments...}"). Mask inside it, or all of it.
        start = min((i for i in (value.find("{"), value.find("[")) if i >= 0), default=-1)
        try:
            inner = value_mask(json.loads(value[start:]), fields)
        except ValueError:
            return MASK
        return value[:start] + json.dumps(inner, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return value


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
    """Dotted paths of the entries ``value_mask`` would hide: what a reveal button may name."""
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
