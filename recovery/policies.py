"""Tool policies (docs/recovery.md, "Policies"): parsing, validation and what a policy decides for one call.

A policy is plain data here (``Policy``), so the rule table and the projection can use it without
caring whether it came from the database or a file. Parsing is strict: every problem names the tool
and the field, and a file with any problem is refused whole.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from recovery.adapters import AdapterError, python_path_check
from recovery.models import RISK_CLASSES, STRATEGIES
from recovery.outbound import OutboundRefused, url_check

RISK_ORDER = {name: i for i, name in enumerate(RISK_CLASSES)}
# Risk classes whose results may be read again when stale: reading again repeats no effect.
FRESH_FOR_RISKS = ("read_only", "idempotent")
ADAPTERS = ("http", "python", "demo_ledger")
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*$")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
_KEYS = {
    "risk_class",
    "strategy",
    "semantic_fields",
    "deadline",
    "key_retention",
    "fresh_for",
    "resolve_within",
    "sensitive_fields",
    "lookup",
    "execute",
    "compensate",
    "value_rules",
    "amount_field",
    "currency_field",
    "target_field",
    "repeat",
}
# ``repeat`` ("new" or "same") is read by the agent's side (reckon-mcp-proxy --policies: whether a
# call asked again after a resume runs again); Reckon checks it so one file serves both.
REPEATS = ("new", "same")
# Optional fields that only shape the words of the approval screen ("may post 840.00 GBP to account
# C-771 a second time"); they decide nothing, so they live in the policy as written (ToolPolicy.source)
# rather than in columns of their own.
WORDING_FIELDS = ("amount_field", "currency_field", "target_field")


class PolicyError(ValueError):
    """A policy that cannot be used; the message names the tool and the field."""


def duration_parse(value: Any, *, what: str) -> float:
    """Seconds in ``"15m"``, ``"2s"``, ``"500ms"``, ``"24h"``, ``"7d"`` (or a bare number of seconds)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
        return float(value)
    m = _DURATION.match(value) if isinstance(value, str) else None
    if not m:
        raise PolicyError(f"{what}: {value!r} is not a duration like \"15m\", \"2s\", \"500ms\" or \"24h\"")
    return float(m.group(1)) * _UNITS[m.group(2)]


@dataclass(frozen=True)
class Policy:
    tool: str
    risk_class: str = "irreversible"
    strategy: str = "escalate"
    semantic_fields: tuple[str, ...] = ()
    deadline_s: int = 900
    key_retention_s: int | None = None
    fresh_for_s: int | None = None
    sensitive_fields: tuple[str, ...] = ()
    lookup: dict | None = None
    execute: dict | None = None
    compensate: dict | None = None
    value_rules: tuple[dict, ...] = ()
    amount_field: str | None = None
    currency_field: str | None = None
    target_field: str | None = None
    # The reports' target for resolving a call (docs/reports.md, "SLA"); None: its deadline. It
    # decides nothing in the engine, so it lives in the policy as written (ToolPolicy.source).
    resolve_within_s: int | None = None
    unclassified: bool = False

    def as_fields(self) -> dict:
        d = asdict(self)
        d.pop("tool")
        d.pop("unclassified")
        for name in WORDING_FIELDS:
            d.pop(name)
        d.pop("resolve_within_s")
        d["semantic_fields"] = list(self.semantic_fields)
        d["sensitive_fields"] = list(self.sensitive_fields)
        d["value_rules"] = [dict(r) for r in self.value_rules]
        return d


def unclassified_policy(tool: str) -> Policy:
    """A tool with no policy: irreversible, escalate, shown as unclassified."""
    return Policy(tool=tool, unclassified=True)


def _adapter(tool: str, name: str, spec: Any) -> dict | None:
    if spec is None:
        return None
    where = f"tool {tool!r}: {name}"
    if not isinstance(spec, dict):
        raise PolicyError(f"{where} must be a table like {{ adapter = \"http\", url = \"...\" }}")
    adapter = spec.get("adapter")
    if adapter not in ADAPTERS:
        raise PolicyError(f"{where}: adapter {adapter!r} is not one of {', '.join(ADAPTERS)}")
    out = dict(spec)
    if adapter == "http":
        url = spec.get("url")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise PolicyError(f"{where}: url {url!r} must be an http:// or https:// URL")
        try:
            url_check(url)
        except OutboundRefused as exc:
            raise PolicyError(f"{where}: url {exc}") from None
        method = str(spec.get("method", "GET" if name == "lookup" else "POST")).upper()
        if method not in ("GET", "POST", "PUT", "PATCH", "DELETE"):
            raise PolicyError(f"{where}: method {spec.get('method')!r} is not an HTTP method")
        out["method"] = method
        out["timeout_s"] = duration_parse(spec.get("timeout", "5s"), what=f"{where}: timeout")
    elif adapter == "python":
        path = spec.get("path") or spec.get("function")
        if not isinstance(path, str) or not re.match(r"^[A-Za-z_][\w.]*[.:][A-Za-z_]\w*$", path):
            raise PolicyError(f"{where}: path {path!r} must be a dotted path like \"package.module.function\"")
        try:
            python_path_check(path)
        except AdapterError as exc:
            raise PolicyError(f"{where}: {exc}") from None
        out["path"] = path
    return out


def _value_rules(tool: str, rules: Any) -> tuple[dict, ...]:
    if rules is None:
        return ()
    if not isinstance(rules, list):
        raise PolicyError(f"tool {tool!r}: value_rules must be a list of tables")
    out = []
    for i, r in enumerate(rules):
        where = f"tool {tool!r}: value_rules[{i}]"
        if not isinstance(r, dict) or not isinstance(r.get("field"), str):
            raise PolicyError(f"{where} needs field = \"<argument>\"")
        if r.get("risk_class") not in RISK_CLASSES:
            raise PolicyError(f"{where}: risk_class {r.get('risk_class')!r} is not one of {', '.join(RISK_CLASSES)}")
        if "above" not in r:
            raise PolicyError(f"{where} needs above = <number>")
        try:
            Decimal(str(r["above"]))
        except InvalidOperation:
            raise PolicyError(f"{where}: above {r['above']!r} is not a number") from None
        out.append({"field": r["field"], "above": str(r["above"]), "risk_class": r["risk_class"]})
    return tuple(out)


def _str_list(tool: str, name: str, value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise PolicyError(f"tool {tool!r}: {name} must be a list of field names")
    return tuple(value)


def policy_parse(tool: str, table: Any) -> Policy:
    """One ``[tools.<name>]`` table as a Policy, or PolicyError naming tool and field."""
    if not isinstance(tool, str) or not tool or len(tool) > 200:
        raise PolicyError(f"tool name {tool!r} must be a non-empty string of at most 200 characters")
    if not isinstance(table, dict):
        raise PolicyError(f"tool {tool!r}: must be a table")
    unknown = sorted(set(table) - _KEYS)
    if unknown:
        raise PolicyError(f"tool {tool!r}: unknown field {unknown[0]!r} (known: {', '.join(sorted(_KEYS))})")
    risk = table.get("risk_class")
    if risk not in RISK_CLASSES:
        raise PolicyError(f"tool {tool!r}: risk_class {risk!r} is not one of {', '.join(RISK_CLASSES)}")
    strategy = table.get("strategy")
    if strategy not in STRATEGIES:
        raise PolicyError(f"tool {tool!r}: strategy {strategy!r} is not one of {', '.join(STRATEGIES)}")
    deadline = int(duration_parse(table.get("deadline", "15m"), what=f"tool {tool!r}: deadline"))
    retention = table.get("key_retention")
    retention_s = int(duration_parse(retention, what=f"tool {tool!r}: key_retention")) if retention is not None else None
    fresh = table.get("fresh_for")
    fresh_for_s = None
    if fresh is not None:
        if risk not in FRESH_FOR_RISKS:
            raise PolicyError(f"tool {tool!r}: fresh_for is only for read_only and idempotent tools, not {risk} (a read done again must not repeat an effect)")
        fresh_for_s = int(duration_parse(fresh, what=f"tool {tool!r}: fresh_for"))
        if fresh_for_s < 1:
            raise PolicyError(f"tool {tool!r}: fresh_for {fresh!r} must be at least 1s")
    within = table.get("resolve_within")
    resolve_within_s = int(duration_parse(within, what=f"tool {tool!r}: resolve_within")) if within is not None else None
    if resolve_within_s is not None and resolve_within_s < 1:
        raise PolicyError(f"tool {tool!r}: resolve_within {within!r} must be at least 1s")
    compensate = _adapter(tool, "compensate", table.get("compensate"))
    if table.get("repeat", "same") not in REPEATS:
        raise PolicyError(f"tool {tool!r}: repeat {table['repeat']!r} is not one of {', '.join(REPEATS)}")
    wording = {}
    for name in WORDING_FIELDS:
        value = table.get(name)
        if value is not None and (not isinstance(value, str) or not value or len(value) > 200):
            raise PolicyError(f"tool {tool!r}: {name} must be the name of one of the tool's arguments")
        wording[name] = value
    if strategy == "compensate" and compensate is None:
        raise PolicyError(f"tool {tool!r}: strategy compensate needs a compensate adapter")
    return Policy(
        tool=tool,
        risk_class=risk,
        strategy=strategy,
        semantic_fields=_str_list(tool, "semantic_fields", table.get("semantic_fields")),
        deadline_s=deadline,
        key_retention_s=retention_s,
        fresh_for_s=fresh_for_s,
        sensitive_fields=_str_list(tool, "sensitive_fields", table.get("sensitive_fields")),
        lookup=_adapter(tool, "lookup", table.get("lookup")),
        execute=_adapter(tool, "execute", table.get("execute")),
        compensate=compensate,
        value_rules=_value_rules(tool, table.get("value_rules")),
        resolve_within_s=resolve_within_s,
        **wording,
    )


def policies_parse(text: str) -> list[Policy]:
    """Every policy in a policy file (TOML); PolicyError on the first problem (nothing loaded)."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PolicyError(f"not valid TOML: {exc}") from None
    unknown = sorted(set(doc) - {"tools"})
    if unknown:
        raise PolicyError(f"unknown top-level table {unknown[0]!r}: policies live under [tools.<name>]")
    tools = doc.get("tools")
    if not isinstance(tools, dict) or not tools:
        raise PolicyError("no [tools.<name>] tables found")
    return [policy_parse(name, table) for name, table in tools.items()]


def policy_from_row(row) -> Policy:
    return Policy(
        tool=row.tool,
        risk_class=row.risk_class,
        strategy=row.strategy,
        semantic_fields=tuple(row.semantic_fields or ()),
        deadline_s=row.deadline_s,
        key_retention_s=row.key_retention_s,
        fresh_for_s=row.fresh_for_s,
        sensitive_fields=tuple(row.sensitive_fields or ()),
        lookup=row.lookup,
        execute=row.execute,
        compensate=row.compensate,
        value_rules=tuple(row.value_rules or ()),
        resolve_within_s=_source_duration(row, "resolve_within"),
        **{name: (row.source or {}).get(name) for name in WORDING_FIELDS},
    )


def _source_duration(row, name: str) -> int | None:
    value = (row.source or {}).get(name)
    return int(duration_parse(value, what=f"tool {row.tool!r}: {name}")) if value is not None else None


def effective_risk(policy: Policy, arguments: Any) -> str:
    """The policy's risk class, raised by any value rule the arguments exceed (never lowered)."""
    risk = policy.risk_class
    if not isinstance(arguments, dict):
        return risk
    for rule in policy.value_rules:
        value = arguments.get(rule["field"])
        try:
            exceeds = Decimal(str(value)) > Decimal(rule["above"])
        except (InvalidOperation, ValueError):
            exceeds = False
        if exceeds and RISK_ORDER[rule["risk_class"]] > RISK_ORDER[risk]:
            risk = rule["risk_class"]
    return risk


def call_terms(policy: Policy, arguments: Any, started_at: datetime) -> dict:
    """The projection columns a policy decides for one call."""
    return {
        "risk_class": effective_risk(policy, arguments),
        "unclassified": policy.unclassified,
        "deadline": started_at + timedelta(seconds=policy.deadline_s),
        "retry_window_closes_at": started_at + timedelta(seconds=policy.key_retention_s) if policy.key_retention_s is not None else None,
    }


@dataclass(frozen=True)
class Action:
    """What the rule table chose for one attempt, and the rule in words (recorded in the event)."""

    kind: str  # complete | retry | escalate | pause_escalate | backoff | compensate | not_happened
    rule: str
    reason: str = field(default="")


def rule_choose(*, policy: Policy, outcome: str | None, risk_class: str, retry_window_open: bool) -> Action:
    """The rules of docs/recovery.md ("The rules") per strategy. ``outcome`` None means the tool has no lookup hook."""
    if outcome == "match":
        return Action("complete", "match: every semantic field equals the call's; the effect happened")
    if outcome == "conflict":
        return Action("pause_escalate", "conflict: an effect with different fields exists; stop the run and ask a person", "conflict")
    if outcome == "unavailable":
        return Action("backoff", "unavailable: the outcome stays unknown; look again later, never retry on missing evidence")
    if policy.unclassified:
        return Action("escalate", "unclassified tool: treated as irreversible with strategy escalate", "unclassified")
    if outcome == "absent":
        if not retry_window_open:
            return Action("escalate", "absent, but the receiver's key retention has passed: a retry is no longer protected", "retention")
        if policy.strategy in ("reconcile_then_retry", "provider_idempotency") or risk_class == "read_only":
            if policy.execute is None:
                if risk_class == "read_only":
                    return Action("not_happened", "absent, read-only tool with no execute hook: nothing to redo; the run may read again")
                return Action("escalate", f"absent, strategy {policy.strategy}, but no execute hook", "policy")
            return Action("retry", f"absent (authoritative), strategy {policy.strategy}: retry with the same key")
        return Action("escalate", f"absent (authoritative), strategy {policy.strategy}: ask a person", "policy")
    # No lookup hook: the strategy decides.
    if risk_class == "read_only":
        if policy.execute is None:
            return Action("not_happened", "no lookup, read-only tool: nothing to reconcile; the run may read again")
        return Action("retry", "no lookup, read-only tool: retry")
    if policy.strategy == "provider_idempotency" and policy.execute is not None and retry_window_open:
        return Action("retry", "no lookup, strategy provider_idempotency: the receiver deduplicates the same key")
    if policy.strategy == "compensate" and policy.compensate is not None:
        return Action("compensate", "no lookup, strategy compensate: run the inverse")
    return Action("escalate", f"no lookup hook, strategy {policy.strategy}: ask a person", "policy")
