"""Who sees which sensitive fields: the one rule both front ends apply before showing a payload.

A person with the ``view_sensitive`` permission sees values unmasked; an agent's token (``append``
scope) gets back exactly what it wrote, because a resumed run must fold what the live run had, or
its context and keys would differ; everyone else sees the policies' sensitive fields masked.

A run's key secret (``key_secret`` in its run_started) is the exception to the first rule: it is
masked for every person and every token without ``append``, whatever their role, and can never be
revealed. Keys are derived from it, so whoever holds it could test guesses of a masked argument
against a call's key; only the run's agents need it, to compute the keys they record.
"""

from __future__ import annotations

from typing import Any

from access.roles import perm
from access.tokens import Principal
from recovery import masking
from recovery.masking import NEVER_REVEALED, sensitive_fields


def mask_for(user) -> frozenset[str]:
    """The fields to mask for a console ``user``: none for holders of view_sensitive, the policies' list otherwise."""
    if user.has_perm(perm("view_sensitive")):
        return NEVER_REVEALED
    return sensitive_fields()


def mask_fields(principal: Principal) -> frozenset[str]:
    """Argument names to mask for an API caller (a token or a signed-in user)."""
    if principal.user is not None:
        return mask_for(principal.user)
    if "append" in principal.scopes:
        return frozenset()
    return sensitive_fields()


def masks_sensitive(fields: frozenset[str]) -> bool:
    """Whether ``fields`` hides any value a person may otherwise see (more than the key secret)."""
    return bool(fields - NEVER_REVEALED)


def masked(value: Any, fields: frozenset[str], values: frozenset[str] = frozenset()) -> Any:
    """``value`` masked by key (``fields``) and by value (``values``, from ``run_sensitive_values``
    for the runs the answer shows): the one masking function, the console's too."""
    return masking.value_mask(value, fields, values)


def shown_paths(value: Any, fields: frozenset[str], values: frozenset[str] = frozenset(), prefix: str = "") -> list[str]:
    """Dotted paths of the sensitive values ``value`` carries in the clear: every place where
    ``masked(value, fields, values)`` would differ from it (a sensitive key, JSON kept as text that
    names one, a known sensitive value inside any text). Empty when showing ``value`` unmasked
    shows nothing sensitive.

    It asks the masking function itself rather than restating its rule, so whatever that function
    masks is what an access record lists.
    """
    if not fields or masking.value_mask(value, fields, values) == value:
        return []
    if isinstance(value, dict):
        out: list[str] = []
        for k, v in value.items():
            p = f"{prefix}{k}"
            hidden = masking.value_mask({k: v}, fields, values).get(k, masking.MASK)
            if hidden == v:
                continue
            if hidden == masking.MASK or not isinstance(v, (dict, list)):
                out.append(p)
            else:
                out.extend(shown_paths(v, fields, values, p + "."))
        return out
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in shown_paths(v, fields, values, f"{prefix}{i}.")]
    return [prefix.rstrip(".") or "(value)"]


def may_reveal_on_call(user, call) -> bool:
    """Whether ``user`` may reveal, one recorded reveal at a time, the sensitive fields of ``call``:
    holders of view_sensitive on any call, and a person who may decide the call while it can be
    decided: a decider must be able to see the field a conflict turns on (both sides of it)."""
    if user.has_perm(perm("view_sensitive")):
        return True
    return user.has_perm(perm("decide_call")) and call.decidable() is None
