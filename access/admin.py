"""Administration of API tokens: create (the secret is shown once), revoke, see last use."""

from django import forms
from django.contrib import admin, messages

from access.models import ApiToken
from access.tokens import SCOPES, TokenError, token_create, token_revoke


class ApiTokenCreateForm(forms.ModelForm):
    scopes = forms.MultipleChoiceField(choices=[(s, s) for s in SCOPES], widget=forms.CheckboxSelectMultiple)
    tenants_text = forms.CharField(required=False, label="Tenants", help_text="comma-separated; empty means every tenant")

    class Meta:
        model = ApiToken
        fields = ["name"]


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ["name", "prefix", "scopes", "tenants", "created_at", "last_used_at", "revoked_at"]
    list_filter = ["revoked_at"]
    search_fields = ["name", "prefix"]
    actions = ["revoke"]

    def get_form(self, request, obj=None, **kwargs):
        if obj is None:
            kwargs["form"] = ApiTokenCreateForm
        return super().get_form(request, obj, **kwargs)

    def get_readonly_fields(self, request, obj=None):
        # A token's powers are fixed at creation: to change them, revoke it and create another.
        return [] if obj is None else ["name", "prefix", "scopes", "tenants", "created_by", "created_at", "last_used_at", "revoked_at"]

    def get_fields(self, request, obj=None):
        return ["name", "scopes", "tenants_text"] if obj is None else self.get_readonly_fields(request, obj)

    def save_model(self, request, obj, form, change):
        if change:
            return
        tenants = [t for t in form.cleaned_data.get("tenants_text", "").split(",") if t.strip()]
        try:
            token, secret = token_create(name=form.cleaned_data["name"], scopes=form.cleaned_data["scopes"], tenants=tenants, created_by=request.user)
        except TokenError as exc:
            messages.error(request, str(exc))
            return
        obj.pk = token.pk
        messages.warning(request, f"Secret for {token.name!r}, shown once, store it now: {secret}")

    def has_delete_permission(self, request, obj=None):
        return False  # revoke instead: the row stays for audit

    @admin.action(description="Revoke selected tokens")
    def revoke(self, request, queryset):
        for token in queryset:
            token_revoke(token=token)
        messages.success(request, f"revoked {queryset.count()} token(s)")
