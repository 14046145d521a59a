"""Tenancy rules both front ends use: which runs a caller limited to some tenants may see.

A token limited to tenants sees a run only when every tenant of the run is one of its own: a run
that touched tenants A and B is invisible to a token of A alone, because its log holds B's data
too. A run that names no tenant belongs to ``default``. The tenants of each run are a read model
kept by the store (``runs.tenants``).
"""

from __future__ import annotations

from typing import Iterable

from django.db.models import Q, QuerySet

from runs.models import RunTenant
from runs.upcasters import DEFAULT_TENANT


def runs_visible(qs: QuerySet, tenants: Iterable[str] | None, field: str = "run_id") -> QuerySet:
    """``qs`` narrowed to runs whose every tenant is in ``tenants`` (None: no limit)."""
    if tenants is None:
        return qs
    allowed = list(tenants)
    outside = RunTenant.objects.exclude(tenant__in=allowed).values("run_id")
    inside = RunTenant.objects.filter(tenant__in=allowed).values("run_id")
    named = RunTenant.objects.values("run_id")
    visible = Q(**{f"{field}__in": inside})
    if DEFAULT_TENANT in allowed:
        visible |= ~Q(**{f"{field}__in": named})
    return qs.filter(visible).exclude(**{f"{field}__in": outside})
