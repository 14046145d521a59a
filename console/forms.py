"""Forms of the console. They check shape and presence (a reason is required, a page size is a
number); what a decision means and whether it is allowed is the recovery engine's to say."""

from __future__ import annotations

import functools

from datetime import UTC, date, datetime, time, timedelta, timezone

from django import forms

from access.models import AccessRecord
from recovery.models import Decision
from runs.json_strict import json_problem

RISK_CHOICES = [("", "any risk"), ("irreversible", "irreversible"), ("reversible", "reversible"), ("idempotent", "idempotent"), ("read_only", "read only")]
STATE_CHOICES = [("", "not resolved"), ("open", "open"), ("reconciling", "reconciling"), ("escalated", "escalated"), ("in_flight", "in flight"), ("resolved", "resolved"), ("all", "all, settled ones too")]
DUP_CHOICES = [("", "either"), ("yes", "possible duplicates only"), ("no", "no possible duplicate")]


VIEW_CHOICES = [("", "everyone's"), ("mine", "mine"), ("unassigned", "unassigned")]
QUEUE_PAGE_SIZES = (25, 50, 100, 200)
QUEUE_DEFAULT_LIMIT = 50


class QueueFilterForm(forms.Form):
    view = forms.ChoiceField(choices=VIEW_CHOICES, required=False, label="Calls", error_messages={"invalid_choice": "view must be mine or unassigned, got %(value)s"})
    risk_class = forms.ChoiceField(choices=RISK_CHOICES, required=False, label="Risk class")
    tool = forms.CharField(required=False, max_length=200, label="Tool contains")
    tenant = forms.CharField(required=False, max_length=200, label="Tenant contains")
    state = forms.ChoiceField(choices=STATE_CHOICES, required=False)
    min_age_m = forms.IntegerField(required=False, min_value=0, max_value=525600, label="Older than (minutes)")
    duplicate = forms.ChoiceField(choices=DUP_CHOICES, required=False, label="Possible duplicate")
    limit = forms.TypedChoiceField(choices=[(n, n) for n in QUEUE_PAGE_SIZES], coerce=int, required=False, empty_value=QUEUE_DEFAULT_LIMIT, label="Per page")

    FILTER_KEYS = ("view", "risk_class", "tool", "tenant", "state", "min_age_m", "duplicate", "limit")

    def __init__(self, data=None, *args, can_hold: bool = True, **kwargs):
        # The page size shown selected is the one used: without one in the address, the default.
        if data is not None and not data.get("limit"):
            data = data.copy()
            data["limit"] = str(QUEUE_DEFAULT_LIMIT)
        super().__init__(data, *args, **kwargs)
        # Someone who can never hold a call (access.assignment.may_hold_calls) is not offered "mine",
        # and a bookmarked one is explained by their role rather than refused as an unknown word.
        if not can_hold:
            view = self.fields["view"]
            view.choices = [c for c in VIEW_CHOICES if c[0] != "mine"]
            view.error_messages["invalid_choice"] = "view must be unassigned or left out (everyone's), got %(value)s: your role cannot claim or be assigned calls, so it has no Mine"

    def selector_kwargs(self, user=None) -> dict:
        """The recovery selector's arguments: "contains, ignoring case" for tool and tenant becomes
        the exact names that contain the text; "mine" needs the signed-in ``user``."""
        from recovery.selectors import calls_values_containing

        d = self.cleaned_data
        dup = {"yes": True, "no": False}.get(d.get("duplicate") or "")
        tool = (d.get("tool") or "").strip()
        tenant = (d.get("tenant") or "").strip()
        view = d.get("view") or ""
        return {
            "risk_class": d.get("risk_class") or None,
            "tool": calls_values_containing(column="tool", text=tool) if tool else None,
            "tenant": calls_values_containing(column="tenant", text=tenant) if tenant else None,
            "state": d.get("state") or None,
            "min_age_s": (d["min_age_m"] * 60) if d.get("min_age_m") is not None else None,
            "possible_duplicate": dup,
            "claimed_by_name": user.get_username() if view == "mine" else None,
            "unclaimed": True if view == "unassigned" else None,
        }


class DecisionForm(forms.Form):
    decision = forms.ChoiceField(
        choices=Decision.choices,
        widget=forms.RadioSelect,
        error_messages={"required": "Choose what you know about this call: one of the options below.", "invalid_choice": "%(value)s is not one of the options below; choose one of them."},
    )
    reason = forms.CharField(max_length=2000, widget=forms.Textarea(attrs={"rows": 3}), error_messages={"required": "Give a reason: it is recorded with your decision.", "max_length": "The reason is too long: at most %(limit_value)d characters (it has %(show_value)d). Shorten it, or put the details in a note."}, help_text="Required: why you decided this. It is kept in the run's log.")
    evidence_ref = forms.CharField(max_length=500, required=False, label="Evidence reference", help_text="For “it happened”: where you saw it (ticket, ledger entry, receipt id).")
    seen_version = forms.IntegerField(widget=forms.HiddenInput, min_value=0)
    # One-time token of the page the form was drawn on (console.views_call._form_token_spend); a client
    # that sends none (a script) is not protected against its own second send.
    form_token = forms.CharField(max_length=64, required=False, widget=forms.HiddenInput)
    assignee = forms.CharField(max_length=150, required=False, label="Escalate to (user name, optional)")
    confirm_twice = forms.BooleanField(
        required=False,
        # The screen draws the box with its call's own words (recovery.consequences, ``confirm``).
        label="I have read what a retry does here.",
    )

    def clean_reason(self):
        reason = self.cleaned_data["reason"].strip()
        if not reason:
            raise forms.ValidationError("Give a reason: it is recorded with your decision.")
        return reason

    def clean(self):
        d = super().clean()
        if d.get("decision") == "happened" and not (d.get("evidence_ref") or "").strip():
            self.add_error("evidence_ref", "“It happened” needs a reference to the evidence you saw.")
        if d.get("decision") == "retry_same_key" and not d.get("confirm_twice"):
            self.add_error("confirm_twice", "Tick the box under the retry: it confirms that you have read what a retry does here.")
        return d


class NoteForm(forms.Form):
    text = forms.CharField(max_length=4000, widget=forms.Textarea(attrs={"rows": 3}), label="Note")


class AssignForm(forms.Form):
    assignee = forms.CharField(max_length=150, label="Assign to (user name)")


BULK_ACTIONS = {
    "claim": "Claim for me",
    "assign": "Assign to someone",
    "escalate": "Escalate",
    "happened": "It happened (only calls with matching evidence)",
}


class BulkForm(forms.Form):
    action = forms.ChoiceField(choices=list(BULK_ACTIONS.items()))
    scope = forms.ChoiceField(choices=[("selected", "the selected calls"), ("all", "every call the filter matches")], initial="selected")
    ids = forms.TypedMultipleChoiceField(coerce=int, required=False)
    assignee = forms.CharField(max_length=150, required=False)
    reason = forms.CharField(max_length=2000, required=False, widget=forms.Textarea(attrs={"rows": 2}))
    step = forms.ChoiceField(choices=[("preview", "preview"), ("apply", "apply")], initial="preview")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Any ids are acceptable in shape; which exist and may be acted on is decided per call.
        self.fields["ids"].valid_value = lambda value: True

    def clean(self):
        d = super().clean()
        if d.get("action") == "assign" and not (d.get("assignee") or "").strip():
            self.add_error("assignee", "Name the person to assign the calls to.")
        if d.get("action") in ("escalate", "happened") and not (d.get("reason") or "").strip():
            self.add_error("reason", "Give a reason: it is recorded with each decision.")
        if d.get("scope") == "selected" and not d.get("ids"):
            self.add_error("ids", "Select at least one call, or choose every call the filter matches.")
        return d


def seen_versions(data) -> dict[int, int]:
    """The version of each call a bulk preview showed (``v_<pk>`` fields): applied only if unchanged."""
    return {int(k[2:]): int(v) for k, v in data.items() if k.startswith("v_") and k[2:].isdigit() and v.isdigit()}


DECISION_LOG_DISPOSITIONS = ("happened", "retry_same_key", "not_happened", "compensate", "escalate", "completed", "retried", "compensated")


class DecisionLogForm(forms.Form):
    """The decision log's filters: who, which tool or tenant, what kind, a date range (UTC days).
    Each message names its filter by the label templates/console/decisions.html shows beside it."""

    by = forms.CharField(required=False, max_length=200)
    tool = forms.CharField(required=False, max_length=200)
    tenant = forms.CharField(required=False, max_length=200)
    disposition = forms.ChoiceField(
        required=False,
        choices=[("", "any"), *[(d, d) for d in DECISION_LOG_DISPOSITIONS]],
        error_messages={"invalid_choice": "Decision or disposition must be one of " + ", ".join(DECISION_LOG_DISPOSITIONS) + ", got %(value)s"},
    )
    kind = forms.ChoiceField(
        required=False,
        choices=[("", "any"), ("person", "person"), ("automatic", "automatic")],
        error_messages={"invalid_choice": "By must be people (person) or rules (automatic), got %(value)s"},
    )
    since = forms.DateField(required=False, input_formats=["%Y-%m-%d"], error_messages={"invalid": "From must be a date as YYYY-MM-DD"})
    until = forms.DateField(required=False, input_formats=["%Y-%m-%d"], error_messages={"invalid": "To must be a date as YYYY-MM-DD"})

    TEXT = ("by", "tool", "tenant", "disposition", "kind")

    def __init__(self, data, *args, **kwargs):
        # People, tools and tenants are free text matched as "contains, ignoring case"; over-long
        # values are cut rather than refused. The choices and dates are refused when unknown (400).
        data = data.copy()
        for k in self.TEXT:
            if k in data:
                data[k] = data[k].strip()[:200]
        super().__init__(data, *args, **kwargs)

    def search_kwargs(self) -> dict:
        d = self.cleaned_data
        since = datetime.combine(d["since"], time.min, tzinfo=timezone.utc) if d.get("since") else None
        until = datetime.combine(d["until"], time.max, tzinfo=timezone.utc) if d.get("until") else None
        return {**{k: d.get(k) or "" for k in self.TEXT}, "since": since, "until": until}


class AccessLogForm(forms.Form):
    """The access record's filters: a person's or token's name, a run id, a front end, UTC days.
    Each message names its filter by the label templates/console/access.html shows beside it."""

    who = forms.CharField(required=False, max_length=200)
    run = forms.CharField(required=False, max_length=200)
    front_end = forms.ChoiceField(
        required=False,
        choices=[("", "any"), *AccessRecord.FrontEnd.choices],
        error_messages={"invalid_choice": "Through must be one of " + ", ".join(f"{v} ({label})" for v, label in AccessRecord.FrontEnd.choices) + ", got %(value)s"},
    )
    since = forms.DateField(required=False, input_formats=["%Y-%m-%d"], error_messages={"invalid": "From must be a date as YYYY-MM-DD"})
    until = forms.DateField(required=False, input_formats=["%Y-%m-%d"], error_messages={"invalid": "To must be a date as YYYY-MM-DD"})

    def search_kwargs(self) -> dict:
        d = self.cleaned_data
        since = datetime.combine(d["since"], time.min, tzinfo=UTC) if d.get("since") else None
        # "To" names the last day shown: everything before the start of the next one.
        until = d.get("until")
        until = datetime.combine(until + timedelta(days=1), time.min, tzinfo=UTC) if until and until < date.max else None
        return {"who": (d.get("who") or "").strip(), "run_id": (d.get("run") or "").strip(), "front_end": d.get("front_end") or "", "since": since, "until": until}


class PolicyEditForm(forms.Form):
    """A change to one tool's policy as the administrators' screen sends it: only the fields given
    change; the field lists are comma-separated. What the values mean is the policy parser's to say."""

    tool = forms.CharField(max_length=200)
    risk_class = forms.CharField(required=False, max_length=32)
    strategy = forms.CharField(required=False, max_length=64)
    deadline = forms.CharField(required=False, max_length=64)
    semantic_fields = forms.CharField(required=False, max_length=2000)
    sensitive_fields = forms.CharField(required=False, max_length=2000)

    def changes(self) -> dict:
        d = self.cleaned_data
        out = {k: d[k].strip() for k in ("risk_class", "strategy", "deadline") if (d.get(k) or "").strip()}
        for k in ("semantic_fields", "sensitive_fields"):
            if k in self.data:
                out[k] = [f.strip() for f in (d.get(k) or "").split(",") if f.strip()]
        return out


@functools.cache
def _zones() -> tuple[str, ...]:
    # The installed time zone database, read once per process (each read walks its folder: about
    # 10 ms, paid on every preferences page before).
    import zoneinfo

    return tuple(sorted(zoneinfo.available_timezones()))


def _zone_choices():
    return [("", "My browser's time zone")] + [(z, z) for z in _zones()]


class PreferenceForm(forms.Form):
    time_zone = forms.ChoiceField(choices=_zone_choices, required=False, label="Show times on hover in", help_text="Times are written in UTC; hovering one shows it in this zone.")


class ReportForm(forms.Form):
    """The reports screen's period and filters (the same names the API takes). Empty: the last 30 days."""

    days = forms.TypedChoiceField(choices=[(7, "last 7 days"), (30, "last 30 days"), (90, "last 90 days")], coerce=int, required=False, empty_value=30, label="Period")
    since = forms.DateField(required=False, label="Or from (UTC date)")
    until = forms.DateField(required=False, label="to (UTC date, included)")
    tenant = forms.CharField(required=False, max_length=200, label="Tenant")
    tool = forms.CharField(required=False, max_length=200, label="Tool")
    risk_class = forms.ChoiceField(choices=RISK_CHOICES, required=False, label="Risk class")
    team = forms.CharField(required=False, max_length=150, label="Team")

    KEYS = ("days", "since", "until", "tenant", "tool", "risk_class", "team")
    NAMES = ("tenant", "tool", "team")

    def clean(self):
        # A name is matched against the log's JSON: one holding no character (NUL, a lone UTF-16
        # surrogate) that JSON text can carry is refused by its label, not sent to the database.
        data = super().clean()
        for name in self.NAMES:
            problem = json_problem(data.get(name) or "", self.fields[name].label)
            if problem:
                self.add_error(name, str(problem))
        return data
