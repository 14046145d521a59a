"""Changes to tool policies: loaded from a TOML document or edited field by field, each recorded
(PolicyChange) with who and when, and the queue's denormalised terms refreshed.
"""

from __future__ import annotations

import tomllib

from django.contrib.auth import get_user_model
from django.db import transaction

from recovery.calls import person_name
from recovery.models import PolicyChange, ToolPolicy
from recovery.masking import sealed_fields_forget
from recovery.policies import Policy, PolicyError, policies_parse, policy_parse
from recovery.rebuild import terms_refresh


def _policy_row_fields(p: Policy, source: dict) -> dict:
    return {**p.as_fields(), "source": source}

def _snapshot(row: ToolPolicy | None) -> dict | None:
    if row is None:
        return None
    return dict(row.source) if row.source else {"risk_class": row.risk_class, "strategy": row.strategy}

def _user_of(by):
    if by is None or isinstance(by, str):
        name = person_name(by)
        User = get_user_model()
        return User.objects.filter(**{User.USERNAME_FIELD: name}).first(), name
    return by, by.get_username()

def _policy_store(p: Policy, source: dict, *, user, name: str, origin: str) -> str:
    row = ToolPolicy.objects.filter(tool=p.tool).first()
    before = _snapshot(row)
    if before == source and row is not None:
        return "unchanged"
    fields = _policy_row_fields(p, source)
    if row is None:
        ToolPolicy.objects.create(tool=p.tool, updated_by=name, **fields)
        outcome = "created"
    else:
        for k, v in fields.items():
            setattr(row, k, v)
        row.updated_by = name
        row.save()
        outcome = "updated"
    PolicyChange.objects.create(tool=p.tool, by=user, by_name=name, source=origin, before=before, after=source)
    terms_refresh(tool=p.tool)
    sealed_fields_forget()
    return outcome

def policies_load(*, text: str, by) -> dict[str, str]:
    """Load a policy file (TOML), all or nothing; returns tool -> created|updated|unchanged."""
    parsed = policies_parse(text)  # raises PolicyError naming the tool and field
    tables = tomllib.loads(text)["tools"]
    user, name = _user_of(by)
    out = {}
    with transaction.atomic():
        for p in parsed:
            out[p.tool] = _policy_store(p, tables[p.tool], user=user, name=name, origin="file")
    return out

def policy_update(*, tool: str, fields: dict, by) -> ToolPolicy:
    """Change some fields of a tool's policy (named and written as in a policy file); recorded with who and when."""
    if not isinstance(fields, dict) or not fields:
        raise PolicyError("no fields to change")
    user, name = _user_of(by)
    with transaction.atomic():
        row = ToolPolicy.objects.select_for_update().filter(tool=tool).first()
        source = dict(row.source) if row is not None and row.source else {}
        for k, v in fields.items():
            if v is None:
                source.pop(k, None)
            else:
                source[k] = v
        p = policy_parse(tool, source)
        _policy_store(p, source, user=user, name=name, origin="edit")
    return ToolPolicy.objects.get(tool=tool)
