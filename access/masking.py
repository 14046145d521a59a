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
