"""Administrators' screen for notification channels and routes: edit one channel or route, load a
whole file after seeing what it changes, and read the change history. Thin: the forms turn the
posted fields into the file's shape; ``notify.config`` checks, stores and records every change.

Secrets are write-only: a channel's ``secret`` and ``routing_key`` are never put in a page (not
even in a hidden field), a blank secret field keeps the current one, and a file to load waits for
its confirmation in the session, not in the page.
"""

from __future__ import annotations

import hashlib

from django import forms
from django.contrib import messages
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from access.roles import requires, role_names
from notify.config import (
    NotifyConfigError,
    channel_remove,
    channel_save,
    config_current,
    config_toml,
    notifications_load,
    notifications_preview,
    route_remove,
    route_save,
)
from notify.models import CHANNEL_KINDS, Channel, ConfigChange
from recovery.models import RISK_CLASSES

PENDING = "notify_config_pending"  # the session key of a file waiting for "Apply"
MAX_FILE = 256 * 1024


def _list(text: str) -> list[str]:
    return [part.strip() for part in (text or "").replace("\n", ",").split(",") if part.strip()]


class ChannelForm(forms.Form):
    name = forms.CharField(max_length=100)
    kind = forms.ChoiceField(choices=[(k, k) for k in CHANNEL_KINDS])
    url = forms.CharField(required=False, max_length=2000)
    to = forms.CharField(required=False, max_length=2000)
    secret = forms.CharField(required=False, max_length=500, strip=True)
    routing_key = forms.CharField(required=False, max_length=500, strip=True)

    def table(self) -> dict:
        """The channel as the file would give it: only the fields its kind has."""
        d = self.cleaned_data
        fields = {"webhook": ("url", "secret"), "slack": ("url",), "pagerduty": ("url", "routing_key"), "email": ("to",)}[d["kind"]]
        table = {"kind": d["kind"]}
        for f in fields:
            table[f] = _list(d[f]) if f == "to" else d[f].strip()
        return table


class RouteForm(forms.Form):
    position = forms.IntegerField(required=False, min_value=0)
    risk_class = forms.MultipleChoiceField(required=False, choices=[(r, r) for r in RISK_CLASSES])
    tool = forms.CharField(required=False, max_length=2000)
    tenant = forms.CharField(required=False, max_length=2000)
    levels = forms.CharField(required=False, max_length=4000, widget=forms.Textarea)
    repeat = forms.CharField(required=False, max_length=32)
    digest_notify = forms.CharField(required=False, max_length=2000)
    digest_at = forms.CharField(required=False, max_length=5)
    digest_timezone = forms.CharField(required=False, max_length=64)

    def clean_levels(self) -> list[dict]:
        """One level a line, ``DELAY: channel, channel`` (``0m: ops-webhook, oncall-mail``)."""
        out = []
        for n, line in enumerate((self.cleaned_data.get("levels") or "").splitlines(), start=1):
            if not line.strip():
                continue
            after, sep, names = line.partition(":")
            if not sep or not after.strip():
                raise forms.ValidationError(f'line {n}: write a level as "DELAY: channel, channel", like "15m: pager"')
            out.append({"notify": _list(names), "after": after.strip()})
        return out

    def table(self) -> dict:
        d = self.cleaned_data
        table: dict = {}
        if d["risk_class"]:
            table["risk_class"] = list(d["risk_class"])
        for f in ("tool", "tenant"):
            if _list(d[f]):
                table[f] = _list(d[f])
        if d["levels"]:
            table["levels"] = d["levels"]
        if d["repeat"].strip():
            table["repeat"] = d["repeat"].strip()
        if _list(d["digest_notify"]) or d["digest_at"].strip() or d["digest_timezone"].strip():
            table["digest"] = {"notify": _list(d["digest_notify"])}
            if d["digest_at"].strip():
                table["digest"]["at"] = d["digest_at"].strip()
            if d["digest_timezone"].strip():
                table["digest"]["timezone"] = d["digest_timezone"].strip()
        return table


def _form_errors(form: forms.Form) -> str:
    return "; ".join(f"{k}: {' '.join(v)}" for k, v in form.errors.items())


def _who(request) -> str:
    return request.user.get_username()


def _said(request, lines: list[str], *, what: str) -> None:
    changed = [line for line in lines if not line.endswith(": unchanged")]
    if changed:
        messages.success(request, f"{what}: " + "; ".join(changed))
    else:
        messages.info(request, f"{what}: nothing changed")


def _route_view(i: int, route: dict) -> dict:
    digest = route.get("digest") or {}
    return {
        "position": i,
        "route": route,
        "levels_text": "\n".join(f"{lv['after']}: {', '.join(lv['notify'])}" for lv in route.get("levels", [])),
        "digest": digest,
    }


@requires("manage_policies")
@require_GET
def config_screen(request):
    doc = config_current()
    secrets = {c.name: sorted(k for k in ("secret", "routing_key") if c.config.get(k)) for c in Channel.objects.all()}
    pending = request.session.get(PENDING)
    ctx = {
        "roles": role_names(request.user),
        "nav": "notifications",
        "channels": [{"name": n, "table": t, "secrets": secrets.get(n, [])} for n, t in doc["channels"].items()],
        "routes": [_route_view(i, r) for i, r in enumerate(doc["routes"])],
        "kinds": CHANNEL_KINDS,
        "risk_classes": RISK_CLASSES,
        "export": config_toml(doc),
        "changes": ConfigChange.objects.all()[:30],
        "pending": pending,
    }
    return render(request, "console/notification_config.html", ctx)


@requires("manage_policies")
@require_POST
def channel_post(request):
    form = ChannelForm(request.POST)
    if not form.is_valid():
        messages.error(request, f"Channel not saved: {_form_errors(form)}")
        return redirect("console:notification_config")
    name = form.cleaned_data["name"].strip()
    try:
        lines = channel_remove(name=name, by=_who(request)) if "remove" in request.POST else channel_save(name=name, table=form.table(), by=_who(request))
    except NotifyConfigError as exc:
        messages.error(request, f"Channel not saved: {exc}")
    else:
        _said(request, lines, what=f"Channel {name}")
    return redirect("console:notification_config")


@requires("manage_policies")
@require_POST
def route_post(request):
    form = RouteForm(request.POST)
    if not form.is_valid():
        messages.error(request, f"Route not saved: {_form_errors(form)}")
        return redirect("console:notification_config")
    position = form.cleaned_data["position"]
    try:
        if "remove" in request.POST:
            if position is None:
                raise NotifyConfigError("say which route to remove")
            lines = route_remove(position=position, by=_who(request))
        else:
            lines = route_save(position=position, table=form.table(), by=_who(request))
    except NotifyConfigError as exc:
        messages.error(request, f"Route not saved: {exc}")
    else:
        _said(request, lines, what="Routes")
    return redirect("console:notification_config")


@requires("manage_policies")
@require_POST
def file_preview(request):
    """Step one of loading a file: what it would change. The text waits in the session (it may
    carry secrets, which a page must never hold) until the administrator applies or discards it."""
    upload = request.FILES.get("file")
    if upload is not None:
        if upload.size > MAX_FILE:
            messages.error(request, f"File not loaded: {upload.name} is larger than {MAX_FILE // 1024} KiB")
            return redirect("console:notification_config")
        raw, source = upload.read(), upload.name
    else:
        raw, source = request.POST.get("text", "").encode(), "pasted text"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        messages.error(request, f"File not loaded: {source} is not UTF-8 text")
        return redirect("console:notification_config")
    if not text.strip():
        messages.error(request, "File not loaded: choose a file or paste its text")
        return redirect("console:notification_config")
    try:
        lines = notifications_preview(text=text)
    except NotifyConfigError as exc:
        messages.error(request, f"File not loaded: {source}: {exc}")
        return redirect("console:notification_config")
    request.session[PENDING] = {"text": text, "source": source[:200], "digest": hashlib.sha256(text.encode()).hexdigest(), "lines": lines}
    return redirect("console:notification_config")


@requires("manage_policies")
@require_POST
def file_apply(request):
    """Step two: apply the file previewed (or discard it). The changes are computed again against
    the configuration as it is now: the last change wins, and the message says what it did."""
    pending = request.session.pop(PENDING, None)
    if "discard" in request.POST:
        messages.info(request, "File discarded: nothing was changed")
        return redirect("console:notification_config")
    if not pending or pending.get("digest") != request.POST.get("digest"):
        messages.error(request, "File not loaded: nothing is waiting to be applied (preview it again)")
        return redirect("console:notification_config")
    try:
        lines = notifications_load(text=pending["text"], by=_who(request), source=f"console: file {pending['source']}")
    except NotifyConfigError as exc:
        messages.error(request, f"File not loaded: {pending['source']}: {exc}")
    else:
        _said(request, lines, what=f"Loaded {pending['source']}")
    return redirect("console:notification_config")
