"""The console's own per-person settings."""

from django.conf import settings
from django.db import models


class UserPreference(models.Model):
    """How one person wants the console shown to them. Times are always written in UTC; ``time_zone``
    (an IANA name, empty: the browser's own) is the zone hovering a time shows it in."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    time_zone = models.CharField(max_length=64, blank=True, default="")

    class Meta:
        db_table = "reckon_user_preference"


class DecisionFormUse(models.Model):
    """One decision form sent: its one-time token (written into the form when the call's screen is
    drawn) and what it was sent for. A second send of the same form (Back and the button again, a
    double click) finds its token here and writes nothing (console.views_call.call_decide)."""

    token = models.CharField(max_length=64, unique=True)
    call_pk = models.BigIntegerField()
    username = models.CharField(max_length=150)
    sent_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "reckon_decision_form_use"
