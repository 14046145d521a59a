"""Run ownership: a renewable lease with a fencing token (the epoch).

``lease_acquire`` gives the caller a new epoch, one more than the last, either because nobody holds
the run or because the holder's lease has expired (a takeover). Expiry is judged by the database's
clock, never the caller's: two workers with skewed clocks still agree on who owns the run. The epoch
is the fence: ``runs.store.events_append`` accepts only the current epoch, so a worker that paused
past its lease and wakes up cannot append even if it still believes it owns the run.

The conditional UPDATE is the whole protocol (healthchecks' ``num_updated != 1`` pattern): whoever
updates the row owns the run. The SELECT before it only explains a refusal. Every acquisition,
takeover, release, refusal and fencing rejection is written to ``LeaseRecord``; renewals are not
(they are heartbeats, and would swamp the table with no decision in them).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import BooleanField, Case, DateTimeField, ExpressionWrapper, F, Q, Value, When
from django.db.models.functions import Now

from runs.errors import InvalidEvent, LeaseHeld, RunNotFound, StaleEpoch
from runs.models import LeaseRecord, Run


@dataclass(frozen=True)
class Lease:
    run_id: str
    epoch: int
    holder: str
    expires_at: datetime
    last_seq: int


def lease_record(*, run_id: str, kind: str, epoch: int, holder: str = "", detail: str = "") -> None:
    LeaseRecord.objects.create(run_id=run_id, kind=kind, epoch=epoch, holder=holder, detail=detail[:2000])


def _expiry(ttl_seconds: float):
    return ExpressionWrapper(Now() + timedelta(seconds=ttl_seconds), output_field=DateTimeField())


def _check(run_id: str, holder: str, ttl_seconds: float) -> None:
    if not isinstance(run_id, str) or not run_id or len(run_id) > 200:
        raise InvalidEvent(f"run id must be a non-empty string of at most 200 characters, got {run_id!r}")
    if not isinstance(holder, str) or not holder or len(holder) > 200:
        raise InvalidEvent(f"lease holder must be a non-empty string of at most 200 characters, got {holder!r}")
    if not (0 < ttl_seconds <= 86400):
        raise InvalidEvent(f"lease length must be between 0 and 86400 seconds, got {ttl_seconds!r}")


def lease_acquire(
    *, run_id: str, holder: str, ttl_seconds: float | None = None, create: bool = True, origin: str = Run.Origin.LIVE
) -> Lease:
    """Take the run's lease with a new epoch, creating the run when ``create`` is set.

    Succeeds when nobody holds the lease or the holder's lease has expired by the database clock
    (recorded as a takeover); raises LeaseHeld otherwise, and RunNotFound for a missing run when
    ``create`` is off.
    """
    ttl = float(ttl_seconds if ttl_seconds is not None else settings.RECKON_LEASE_SECONDS)
    _check(run_id, holder, ttl)
    if create and not Run.objects.filter(run_id=run_id).exists():
        try:
            with transaction.atomic():
                Run.objects.create(run_id=run_id, origin=origin)
        except IntegrityError:
            pass  # created by a concurrent acquirer; the conditional update below decides
    free = Q(lease_holder="") | Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lte=Now())
    with transaction.atomic():
        before = (
            Run.objects.filter(run_id=run_id)
            .annotate(expired=Case(When(free, then=Value(True)), default=Value(False), output_field=BooleanField()))
            .values("lease_epoch", "lease_holder", "lease_expires_at", "expired")
            .first()
        )
        if before is None:
            raise RunNotFound(run_id)
        updated = Run.objects.filter(run_id=run_id, lease_epoch=before["lease_epoch"]).filter(free).update(
            lease_epoch=F("lease_epoch") + 1, lease_holder=holder, lease_expires_at=_expiry(ttl)
        )
        if updated != 1:
            current = Run.objects.filter(run_id=run_id).values("lease_epoch", "lease_holder", "lease_expires_at").get()
            refused = LeaseHeld(
                run_id=run_id, holder=current["lease_holder"], epoch=current["lease_epoch"], expires_at=current["lease_expires_at"]
            )
        else:
            refused = None
            row = Run.objects.filter(run_id=run_id).values("lease_epoch", "lease_expires_at", "last_seq").get()
            kind = "takeover" if before["lease_holder"] else "acquired"
            detail = f"took over from {before['lease_holder']!r} (epoch {before['lease_epoch']})" if before["lease_holder"] else ""
            lease_record(run_id=run_id, kind=kind, epoch=row["lease_epoch"], holder=holder, detail=detail)
    if refused is not None:
        lease_record(run_id=run_id, kind="refused", epoch=refused.epoch, holder=holder, detail=str(refused))
        raise refused
    return Lease(run_id, row["lease_epoch"], holder, row["lease_expires_at"], row["last_seq"])


def lease_renew(*, run_id: str, epoch: int, ttl_seconds: float | None = None) -> Lease:
    """Extend the current epoch's lease from now (database clock); StaleEpoch if it is not current.

    A lease that expired but was not taken over can still be renewed: the epoch, not the clock, is
    what fences writers.
    """
    ttl = float(ttl_seconds if ttl_seconds is not None else settings.RECKON_LEASE_SECONDS)
    if not (0 < ttl <= 86400):
        raise InvalidEvent(f"lease length must be between 0 and 86400 seconds, got {ttl!r}")
    updated = Run.objects.filter(run_id=run_id, lease_epoch=epoch).exclude(lease_holder="").update(lease_expires_at=_expiry(ttl))
    row = Run.objects.filter(run_id=run_id).values("lease_epoch", "lease_holder", "lease_expires_at", "last_seq").first()
    if row is None:
        raise RunNotFound(run_id)
    if updated != 1:
        error = StaleEpoch(run_id=run_id, epoch=epoch, current_epoch=row["lease_epoch"], last_seq=row["last_seq"], released=row["lease_epoch"] == epoch)
        lease_record(run_id=run_id, kind="fenced", epoch=epoch, detail=f"renewal refused: {error}")
        raise error
    return Lease(run_id, epoch, row["lease_holder"], row["lease_expires_at"], row["last_seq"])


def lease_release(*, run_id: str, epoch: int) -> None:
    """Give the lease up so the next acquirer need not wait for expiry; StaleEpoch if not current."""
    updated = Run.objects.filter(run_id=run_id, lease_epoch=epoch).exclude(lease_holder="").update(lease_holder="", lease_expires_at=None)
    if updated != 1:
        row = Run.objects.filter(run_id=run_id).values("lease_epoch", "last_seq").first()
        if row is None:
            raise RunNotFound(run_id)
        raise StaleEpoch(run_id=run_id, epoch=epoch, current_epoch=row["lease_epoch"], last_seq=row["last_seq"], released=row["lease_epoch"] == epoch)
    lease_record(run_id=run_id, kind="released", epoch=epoch)


def db_now() -> datetime:
    """The database clock, the one every lease expiry is judged by."""
    with connection.cursor() as cur:
        if connection.vendor == "postgresql":
            cur.execute("SELECT now()")
            return cur.fetchone()[0]
        cur.execute("SELECT STRFTIME('%Y-%m-%d %H:%M:%f', 'NOW')")
        from datetime import timezone

        return datetime.fromisoformat(cur.fetchone()[0]).replace(tzinfo=timezone.utc)
