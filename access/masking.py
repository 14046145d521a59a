"""Who sees which sensitive fields: the one rule both front ends apply before showing a payload.

A person with the ``view_sensitive`` permission sees values unmasked; an agent's token (``append``
scope) gets back exactly what it wrote, because a resumed run must fold what the live run had, or
its context and keys would differ; everyone else sees the policies' sensitive fields masked.
"""

from __future__ import annotations

from typing import Any

from access.roles import perm
from access.tokens import Principal
from recovery import masking
from recovery.masking import sensitive_fields


def mask_for(user) -> frozenset[str]:
    """The fields to mask for a console ``user``: none for holders of view_sensitive, the policies' list otherwise."""
    if user.has_perm(perm("view_sensitive")):
        return frozenset()
    return sensitive_fields()


def mask_fields(principal: Principal) -> frozenset[str]:
    """Argument names to mask for an API caller (a token or a signed-in user)."""
    if principal.user is not None:
        return mask_for(principal.user)
    if "append" in principal.scopes:
        return frozenset()
    return sensitive_fields()


def masked(value: Any, fields: frozenset[str], values: frozenset[str] = frozenset()) -> Any:
    """``value`` masked by key (``fields``) and by value (``values``, from ``run_sensitive_values``
    for the runs the answer shows): the one masking function, the console's too."""
    return masking.value_mask(value, fields, values)
