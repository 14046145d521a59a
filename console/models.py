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
