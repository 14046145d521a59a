"""Uncertain calls, decisions and policies over HTTP: thin callers of recovery.selectors and
recovery.decisions, the same functions the console's screens call, so a rule lives once.

Decisions honour an ``Idempotency-Key`` header like Stripe's: the first response to a key is stored
(console.idempotency) and a repeat with the same body gets it again without a second decision; the
same key with a different body is refused with 422. The decision itself also carries the version
the caller saw, so a decision taken on a stale view is refused with 409 whatever the key.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from django.http import HttpRequest
from django.utils import timezone
from ninja import Field, Header, Path, Query, Router, Schema

from access.assignment import call_escalate
from access.masking import mask_fields, masked
from access.roles import perm
from access.services import Shown, unmasked_reads_record
from access.tenancy import runs_visible
from access.tokens import Principal
from api.auth import caller
from api.errors import Forbidden, NotFound, Unprocessable
from api.idempotency import idempotent
from api.schemas import clean_name, request_route, responses
from recovery import selectors
from recovery.adapters import evidence_shortened
from recovery.decisions import call_claim, decision_record
from recovery.errors import InvalidDecision, NotDecidable
from recovery.masking import run_sensitive_values, sensitive_fields
from recovery.models import Decision, ToolPolicy, UncertainCall
from recovery.policy_changes import policy_update

router = Router(tags=["recovery"])


class UncertainCallOut(Schema):
    id: int
    run_id: str
    call_id: str
    tool: str
    idempotency_key: str
    arguments: Any = None
    tenant: str
    start_seq: int
    started_at: datetime
    state: str
    risk_class: str
    unclassified: bool
    deadline: datetime | None
    overdue: bool
    retry_window_closes_at: datetime | None
    possible_duplicate: bool
    disposition: str
    attempts: int
    last_outcome: str
    last_error: str
    escalation_reason: str
    claimed_by: str
    version: int


class UncertainCallPage(Schema):
    calls: list[UncertainCallOut]
    next: str | None = Field(None, description="pass as ?after= for the next page")


class AttemptOut(Schema):
    seq: int
    ts: datetime | None = None
    attempt: Any = None
    phase: str | None = None
    outcome: str | None = None
    rule: str | None = None
    action: str | None = None
    error: str | None = None
    evidence: Any = None


class HistoryOut(Schema):
    seq: int
    ts: datetime | None = None
    type: str
    payload: dict[str, Any]


class UncertainCallDetail(Schema):
    call: UncertainCallOut
    attempts: list[AttemptOut]
    history: list[HistoryOut]


class CallFilters(Schema):
    risk_class: Literal["read_only", "idempotent", "reversible", "irreversible"] | None = None
    tool: str | None = Field(None, min_length=1, max_length=200)
    tenant: str | None = Field(None, min_length=1, max_length=200)
    state: Literal["in_flight", "open", "reconciling", "escalated", "resolved", "all"] | None = Field(None, description="default: the unresolved states (open, reconciling, escalated)")
    min_age_s: float | None = Field(None, ge=0, le=10**9)
    possible_duplicate: bool | None = None
    after: str | None = Field(None, max_length=600)
    limit: int = Field(50, ge=1, le=500)


# The OpenAPI document lists exactly the decisions recovery.decisions accepts: built from their one list.
DecisionValue = Literal[tuple(Decision.values)]  # type: ignore[valid-type]


class DecisionIn(Schema):
    decision: DecisionValue = Field(..., description="; ".join(f"{c.value}: {c.label}" for c in Decision))
    reason: str = Field(..., min_length=1, max_length=2000)
    seen_version: int = Field(..., ge=0, le=2**31 - 1, description="the call's version you decided on")
    evidence_ref: str | None = Field(None, max_length=500, description="for 'happened': the reference that proves it")
    assignee: str | None = Field(None, max_length=150, description="for 'escalate': the user to hand the call to; they must be active and able to decide calls")


class ClaimIn(Schema):
    seen_version: int = Field(..., ge=0, le=2**31 - 1, description="the call's version you claimed on")


class PolicyOut(Schema):
    tool: str
    risk_class: str
    strategy: str
    semantic_fields: list[str]
    deadline_s: int
    key_retention_s: int | None
    sensitive_fields: list[str]
    lookup: dict[str, Any] | None
    execute: dict[str, Any] | None
    compensate: dict[str, Any] | None
    value_rules: list[dict[str, Any]]
    updated_at: datetime
    updated_by: str


class PolicyIn(Schema):
    fields: dict[str, Any] = Field(..., description="policy fields by their names and forms in docs/recovery.md (Policies); null removes a field")


def _overdue(row: UncertainCall) -> bool:
    # The queue's reads set ``overdue`` with the clock they ranked by; any other row is asked now.
    known = getattr(row, "overdue", None)
    return row.is_overdue(timezone.now()) if known is None else bool(known)


def _call_out(row: UncertainCall, mask: frozenset[str], values: frozenset[str] = frozenset()) -> dict:
    return {
        "id": row.pk,
        "run_id": row.run_id,
        "call_id": row.call_id,
        "tool": row.tool,
        # A legacy key of a call with a sensitive argument is one of the run's sensitive values (recovery.masking).
        "idempotency_key": masked(row.idempotency_key, mask, values),
        "arguments": masked(row.arguments, mask, values),
        "tenant": row.tenant,
        "start_seq": row.start_seq,
        "started_at": row.started_at,
        "state": row.state,
        "risk_class": row.risk_class,
        "unclassified": row.unclassified,
        "deadline": row.deadline,
        "overdue": _overdue(row),
        "retry_window_closes_at": row.retry_window_closes_at,
        "possible_duplicate": row.possible_duplicate,
        "disposition": row.disposition,
        "attempts": row.attempts,
        "last_outcome": row.last_outcome,
        # An error may quote the receiver's JSON, sensitive fields included: the same rule applies.
        "last_error": masked(row.last_error, mask, values),
        "escalation_reason": row.escalation_reason,
        "claimed_by": row.claimed_by_name,
        "version": row.version,
    }


def _call_shown(call: dict, value: Any = None) -> Shown:
    return Shown(call["run_id"], call if value is None else value, call_id=call["call_id"], idempotency_key=call["idempotency_key"])


def _visible_call(principal: Principal, pk: int) -> UncertainCall:
    row = selectors.uncertain_call_get(pk=pk)
    # The run's rule, not the call's own tenant: a call of a run that also touched another tenant
    # is as invisible as the run (access.tenancy).
    if not principal.may_see_run(row.run_id):
        raise NotFound(f"uncertain call {pk} does not exist")
    return row


@router.get("/uncertain-calls", response=responses({200: UncertainCallPage}), auth=caller("read"), summary="List uncertain calls")
def calls_list_view(request: HttpRequest, filters: Query[CallFilters]):
    """The queue with the console's filters, most dangerous first (possible duplicates, overdue
    irreversible calls, then age); keyset pagination through ``next``. A token limited to several
    tenants must name one in ``tenant``."""
    principal: Principal = request.auth
    tenant = clean_name(filters.tenant, "tenant") if filters.tenant else None
    if principal.tenants is not None:
        if tenant is None:
            if len(principal.tenants) != 1:
                raise Unprocessable("this token serves several tenants: name one in ?tenant=")
            tenant = next(iter(principal.tenants))
        elif tenant not in principal.tenants:
            return {"calls": [], "next": None}
    page = selectors.uncertain_calls_filter(
        risk_class=filters.risk_class,
        tool=filters.tool,
        tenant=tenant,
        state=filters.state,
        min_age_s=filters.min_age_s,
        possible_duplicate=filters.possible_duplicate,
        after=filters.after,
        limit=filters.limit,
        scope=lambda qs: runs_visible(qs, principal.tenants),
    )
    mask = mask_fields(principal)
    values = run_sensitive_values(run_ids={r.run_id for r in page.items}, fields=mask)
    calls = [_call_out(r, mask, values) for r in page.items]
    unmasked_reads_record(who=principal, mask=mask, route=request_route(request), shown=[_call_shown(c) for c in calls])
    return {"calls": calls, "next": page.next_cursor}


@router.get("/uncertain-calls/{pk}", response=responses({200: UncertainCallDetail}), auth=caller("read"), summary="One uncertain call with its evidence")
def call_view(request: HttpRequest, pk: int = Path(..., ge=1, le=2**63 - 1)):
    """The call, every reconciliation attempt with its evidence, and every event about it."""
    principal: Principal = request.auth
    _visible_call(principal, pk)
    doc = selectors.uncertain_call_evidence(pk=pk)
    mask = mask_fields(principal)
    values = run_sensitive_values(run_ids=[doc["call"].run_id], fields=mask)
    out = {
        "call": _call_out(doc["call"], mask, values),
        "attempts": [{**a, "evidence": evidence_shortened(masked(a["evidence"], mask, values)), "error": masked(a["error"], mask, values), "rule": masked(a.get("rule"), mask, values)} for a in doc["attempts"]],
        "history": [{**h, "payload": masked(h["payload"], mask, values)} for h in doc["history"]],
    }
    unmasked_reads_record(who=principal, mask=mask, route=request_route(request), shown=[_call_shown(out["call"], value=out)])
    return out


@router.post(
    "/uncertain-calls/{pk}/decisions",
    response=responses({200: UncertainCallOut}),
    auth=caller("decide"),
    summary="Record a decision on an uncertain call",
)
def decision_view(
    request: HttpRequest,
    body: DecisionIn,
    pk: int = Path(..., ge=1, le=2**63 - 1),
    idempotency_key: str | None = Header(None, alias="Idempotency-Key", max_length=255, description="repeat-safe submission, as Stripe's"),
):
    """The same decisions as the console, through ``recovery.decisions.decision_record``: each
    appends ``approval_decided`` and its consequences to the run's log. 409 ``not_decidable`` when
    the call may not be decided in its state (in flight: its agent may still complete it; resolved),
    with the reason as ``detail``; 409 ``stale_decision`` when it changed since ``seen_version``;
    409 ``run_busy`` when someone holds its run; 422 for a decision that is not one of the listed
    values or that the policy cannot carry out. Nothing is written in any of these cases."""
    principal: Principal = request.auth

    def decide():
        row = _visible_call(principal, pk)
        by = principal.user if principal.user is not None else f"api:{principal.name}"
        if body.decision == Decision.ESCALATE:
            row = call_escalate(pk=row.pk, by=by, reason=body.reason, seen_version=body.seen_version, assignee=body.assignee)
        elif body.assignee:
            raise InvalidDecision("assignee is only for the 'escalate' decision")
        else:
            row = decision_record(pk=row.pk, decision=body.decision, by=by, reason=body.reason, seen_version=body.seen_version, evidence_ref=body.evidence_ref)
        # The answer to a decision is an acknowledgement, not a read: its arguments are masked for
        # everyone (GET the call to see them, which is recorded), and so is the copy the
        # Idempotency-Key store keeps and replays.
        fields = sensitive_fields()
        return 200, _call_out(row, fields, run_sensitive_values(run_ids=[row.run_id], fields=fields))

    return idempotent(request, principal=principal, key=idempotency_key, body=body.dict(), run=decide)


@router.post("/uncertain-calls/{pk}/claim", response=responses({200: UncertainCallOut}), auth=caller("decide"), summary="Claim an uncertain call (acknowledge it)")
def claim_view(request: HttpRequest, body: ClaimIn, pk: int = Path(..., ge=1, le=2**63 - 1)):
    """Take the call, as the console's Claim button does: the queue shows who is on it, and the
    claim is the acknowledgement that stops notifications climbing to the next level. 409
    ``not_decidable`` for a resolved call, 409 ``stale_decision`` when it changed since
    ``seen_version``; nothing is written then."""
    principal: Principal = request.auth
    row = _visible_call(principal, pk)
    if row.state == UncertainCall.State.RESOLVED:
        raise NotDecidable(pk=row.pk, state=row.state, reason=row.decidable())
    by = principal.user if principal.user is not None else f"api:{principal.name}"
    row = call_claim(pk=row.pk, user=by, seen_version=body.seen_version)
    # Like a decision's answer, a claim's is an acknowledgement, not a read: masked for everyone.
    fields = sensitive_fields()
    return _call_out(row, fields, run_sensitive_values(run_ids=[row.run_id], fields=fields))


@router.get("/policies", response=responses({200: list[PolicyOut]}), auth=caller("read"), summary="Tool policies")
def policies_view(request: HttpRequest):
    return list(ToolPolicy.objects.order_by("tool"))


@router.get("/policies/{tool}", response=responses({200: PolicyOut}), auth=caller("read"), summary="One tool's policy")
def policy_view(request: HttpRequest, tool: str):
    row = ToolPolicy.objects.filter(tool=clean_name(tool, "tool")).first()
    if row is None:
        raise NotFound(f"tool {tool!r} has no policy (it is treated as irreversible, strategy escalate)")
    return row


@router.patch("/policies/{tool}", response=responses({200: PolicyOut}), auth=caller("read"), summary="Change a tool's policy (administrators)")
def policy_update_view(request: HttpRequest, tool: str, body: PolicyIn):
    """Change some fields of a tool's policy, creating it if needed; every change is recorded with
    who and when. Administrators only (a console session with the manage policies permission)."""
    principal: Principal = request.auth
    user = principal.user
    if user is None or not (principal.is_admin or user.has_perm(perm("manage_policies"))):
        raise Forbidden("changing a policy is for administrators, signed in to the console")
    return policy_update(tool=clean_name(tool, "tool"), fields=body.fields, by=user)
