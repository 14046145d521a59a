"""Run ownership: a renewable lease with a fencing token (the epoch).

``lease_acquire`` gives the caller a new epoch, one more than the last, either because nobody holds
the run or because the holder's lease has expired (a takeover). Expiry is judged by the database's
clock, never the caller's: two workers with skewed clocks still agree on who owns the run. The epoch
is the fence: ``runs.store.events_append`` accepts only the current epoch, so a worker that paused
past its lease and wakes up cannot append even if it still believes it owns the run.

A lease belongs to its holder: ``owner`` (the API caller's stable key, "" for Reckon's own writers)
is written with the epoch it acquired, and ``lease_owner_check`` refuses renewal, release and
append under an epoch to anyone else (api.runs asks it before each). An epoch is acquired once and
belongs to one owner for good, so a check made before the write cannot be overtaken: a newer epoch
fences the write itself.

The conditional UPDATE is the whole protocol (healthchecks' ``num_updated != 1`` pattern): whoever
updates the row owns the run. The SELECT before it only explains a refusal. Every acquisition,
takeover, release, refusal and fencing rejection is written to ``LeaseRecord``; renewals are not
(they are heartbeats, and would swamp the table with no decision in them).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import BooleanField, Case, DateTimeField, ExpressionWrapper, F, Q, Value, When
from django.db.models.functions import Now

from runs.errors import InvalidEvent, LeaseHeld, RunNotFound, StaleEpoch
from runs.models import LeaseRecord, Run
from runs.pg import server_cursor


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


def lease_acquire(*, run_id: str, holder: str, ttl_seconds: float | None = None, create: bool = True, origin: str = Run.Origin.LIVE, lazily: bool = False, owner: str = "") -> Lease:
    """Take the run's lease with a new epoch, creating the run when ``create`` is set.

    Succeeds when nobody holds the lease or the holder's lease has expired by the database clock
    (recorded as a takeover); raises LeaseHeld otherwise, and RunNotFound for a missing run when
    ``create`` is off. ``owner``: who the new epoch belongs to (``Run.lease_owner``).

    ``lazily``: on PostgreSQL, an acquisition that commits on its own (no transaction open) commits
    without waiting for its WAL flush, set by its own statement (``recovery.ownership.commit_lazily``
    says why lease bookkeeping may). Inside a transaction it changes nothing: the setting would
    reach whatever else that transaction writes.
    """
    ttl = float(ttl_seconds if ttl_seconds is not None else settings.RECKON_LEASE_SECONDS)
    _check(run_id, holder, ttl)
    if connection.vendor == "postgresql":
        return _pg_acquire(run_id, holder, ttl, create, origin, lazily and connection.get_autocommit(), owner)
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
            lease_epoch=F("lease_epoch") + 1, lease_holder=holder, lease_expires_at=_expiry(ttl), lease_owner=owner
        )
        if updated != 1:
            current = Run.objects.filter(run_id=run_id).values("lease_epoch", "lease_holder", "lease_expires_at", "lease_owner").get()
            refused = LeaseHeld(
                run_id=run_id, holder=current["lease_holder"], epoch=current["lease_epoch"], expires_at=current["lease_expires_at"], owner=current["lease_owner"]
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


# PostgreSQL: acquisition is one statement. ``prev`` locks the run row (a concurrent acquirer waits
# here and then sees the committed holder), ``upd`` takes the lease only when it is free by the
# database clock, and ``rec`` writes the acquisition or takeover record in the same statement, so a
# lease change and its record commit together with one round trip.
def lease_acquire_ctes(*, run: str = "%(run_id)s", when: str = "", owned: bool = False) -> str:
    """The acquisition's common table expressions (``prev``, ``upd``, ``rec``; no ``WITH``), for
    ``lease_acquire`` and for a statement that finds the run itself: ``run`` is an SQL expression
    naming the run id, ``when`` (may be empty) a condition under which the lease is tried at all.
    When ``when`` is false, or no run is named, ``prev`` is empty and nothing is written, not even a
    refusal. Parameters: ``%(holder)s`` and ``%(ttl)s``, and ``%(owner)s`` when ``owned`` (else the
    lease is Reckon's own, owner ""). The caller's result reads ``upd`` (the new
    epoch, expiry and the run's last seq; empty when refused) and ``prev`` (who held it before)."""
    guard = f" AND ({when})" if when else ""
    owner = "%(owner)s" if owned else "''"
    return f"""prev AS (
    SELECT run_id, lease_epoch, lease_holder, lease_expires_at, lease_owner,
           (lease_holder = '' OR lease_expires_at IS NULL OR lease_expires_at <= now()) AS free
      FROM reckon_run WHERE run_id = {run}{guard} FOR UPDATE
), upd AS (
    UPDATE reckon_run r
       SET lease_epoch = r.lease_epoch + 1, lease_holder = %(holder)s,
           lease_expires_at = now() + make_interval(secs => %(ttl)s), lease_owner = {owner}
      FROM prev
     WHERE r.run_id = prev.run_id AND prev.free
 RETURNING r.lease_epoch, r.lease_expires_at, r.last_seq
), rec AS (
    INSERT INTO reckon_lease_record (run_id, kind, epoch, holder, detail, at)
    SELECT prev.run_id,
           CASE WHEN prev.lease_holder = '' THEN 'acquired' ELSE 'takeover' END,
           upd.lease_epoch, %(holder)s,
           CASE WHEN prev.lease_holder = '' THEN ''
                ELSE 'took over from ' || quote_literal(prev.lease_holder) || ' (epoch ' || prev.lease_epoch || ')' END,
           now()
      FROM upd, prev
)"""


# What a statement built on ``lease_acquire_ctes`` selects for ``lease_outcome``, in this order.
LEASE_RESULT = "upd.lease_epoch, upd.lease_expires_at, upd.last_seq, prev.lease_epoch, prev.lease_holder, prev.lease_expires_at"
# Selected beside it by a statement that commits on its own and may do so without waiting for its
# WAL flush (``lazily``): the setting is made by the statement, evaluated before its implicit commit.
LAZY_COMMIT = "set_config('synchronous_commit', 'off', true)"

_PG_ACQUIRE_RESULT = f"SELECT {LEASE_RESULT}{{lazily}}\n  FROM prev LEFT JOIN upd ON true\n"
_PG_ACQUIRE = "WITH " + lease_acquire_ctes(owned=True) + "\n" + _PG_ACQUIRE_RESULT.format(lazily=", prev.lease_owner")
_PG_ACQUIRE_LAZILY = "WITH " + lease_acquire_ctes(owned=True) + "\n" + _PG_ACQUIRE_RESULT.format(lazily=", prev.lease_owner, " + LAZY_COMMIT)

_PG_CREATE = """
INSERT INTO reckon_run (run_id, origin, source_file, created_at, last_seq, lease_epoch, lease_holder)
VALUES (%(run_id)s, %(origin)s, '', now(), 0, 0, '') ON CONFLICT (run_id) DO NOTHING
"""


def _pg(sql: str, params: dict) -> list[tuple]:
    with server_cursor() as cur:
        cur.execute(sql, params, prepare=True)
        return cur.fetchall() if cur.description else [(cur.rowcount,)]


def _pg_acquire(run_id: str, holder: str, ttl: float, create: bool, origin: str, lazily: bool = False, owner: str = "") -> Lease:
    params = {"run_id": run_id, "holder": holder, "ttl": ttl, "origin": str(origin), "owner": owner}
    sql = _PG_ACQUIRE_LAZILY if lazily else _PG_ACQUIRE
    rows = _pg(sql, params)
    if not rows and create:
        _pg(_PG_CREATE, params)
        rows = _pg(sql, params)
    if not rows:
        raise RunNotFound(run_id)
    return lease_outcome(run_id, holder, rows[0][:6], held_owner=rows[0][6])


def lease_outcome(run_id: str, holder: str, values, held_owner: str = "") -> Lease:
    """The lease a statement built on ``lease_acquire_ctes`` took (``values``: its ``LEASE_RESULT``
    columns); a refusal is recorded (a statement of its own, as every refusal is) and raised as
    LeaseHeld."""
    epoch, expires_at, last_seq, held_epoch, held_by, held_until = values
    if epoch is None:
        refused = LeaseHeld(run_id=run_id, holder=held_by, epoch=held_epoch, expires_at=held_until, owner=held_owner)
        lease_record(run_id=run_id, kind="refused", epoch=held_epoch, holder=holder, detail=str(refused))
        raise refused
    return Lease(run_id, epoch, holder, expires_at, last_seq)


def lease_owner_check(*, run_id: str, epoch: int, owner: str) -> None:
    """LeaseHeld when ``epoch`` is the run's live lease and ``owner`` did not acquire it: renewal,
    release and append under it are its owner's alone. Any other case is left to the write itself,
    which refuses a stale or released epoch (StaleEpoch) and a missing run (RunNotFound)."""
    row = Run.objects.filter(run_id=run_id).values("lease_epoch", "lease_holder", "lease_expires_at", "lease_owner").first()
    if row is not None and row["lease_epoch"] == epoch and row["lease_holder"] and row["lease_owner"] != owner:
        raise LeaseHeld(run_id=run_id, holder=row["lease_holder"], epoch=epoch, expires_at=row["lease_expires_at"], owner=row["lease_owner"])


def lease_owner_of(*, run_id: str, epoch: int) -> str | None:
    """Who acquired ``epoch`` if it is the run's current epoch, else None."""
    row = Run.objects.filter(run_id=run_id, lease_epoch=epoch).values_list("lease_owner", flat=True).first()
    return row


def lease_renew(*, run_id: str, epoch: int, ttl_seconds: float | None = None) -> Lease:
    """Extend the current epoch's lease from now (database clock); StaleEpoch if it is not current.

    A lease that expired but was not taken over can still be renewed: the epoch, not the clock, is
    what fences writers.
    """
    ttl = float(ttl_seconds if ttl_seconds is not None else settings.RECKON_LEASE_SECONDS)
    if not (0 < ttl <= 86400):
        raise InvalidEvent(f"lease length must be between 0 and 86400 seconds, got {ttl!r}")
    if connection.vendor == "postgresql":
        rows = _pg(_PG_RENEW, {"run_id": run_id, "epoch": epoch, "ttl": ttl})
        if rows:
            holder, expires_at, last_seq = rows[0]
            return Lease(run_id, epoch, holder, expires_at, last_seq)
    updated = Run.objects.filter(run_id=run_id, lease_epoch=epoch).exclude(lease_holder="").update(lease_expires_at=_expiry(ttl))
    row = Run.objects.filter(run_id=run_id).values("lease_epoch", "lease_holder", "lease_expires_at", "last_seq").first()
    if row is None:
        raise RunNotFound(run_id)
    if updated != 1:
        error = StaleEpoch(run_id=run_id, epoch=epoch, current_epoch=row["lease_epoch"], last_seq=row["last_seq"], released=row["lease_epoch"] == epoch)
        lease_record(run_id=run_id, kind="fenced", epoch=epoch, detail=f"renewal refused: {error}")
        raise error
    return Lease(run_id, epoch, row["lease_holder"], row["lease_expires_at"], row["last_seq"])


_PG_RENEW = """
UPDATE reckon_run SET lease_expires_at = now() + make_interval(secs => %(ttl)s)
 WHERE run_id = %(run_id)s AND lease_epoch = %(epoch)s AND lease_holder <> ''
RETURNING lease_holder, lease_expires_at, last_seq
"""

_PG_RELEASE = """
WITH upd AS (
    UPDATE reckon_run SET lease_holder = '', lease_expires_at = NULL
     WHERE run_id = %(run_id)s AND lease_epoch = %(epoch)s AND lease_holder <> ''
 RETURNING run_id, lease_epoch
)
INSERT INTO reckon_lease_record (run_id, kind, epoch, holder, detail, at)
SELECT run_id, 'released', lease_epoch, '', '', now() FROM upd
"""


def lease_release(*, run_id: str, epoch: int) -> None:
    """Give the lease up so the next acquirer need not wait for expiry; StaleEpoch if not current."""
    if connection.vendor == "postgresql":
        (released,) = _pg(_PG_RELEASE, {"run_id": run_id, "epoch": epoch})[0]
        if released == 1:
            return
    updated = Run.objects.filter(run_id=run_id, lease_epoch=epoch).exclude(lease_holder="").update(lease_holder="", lease_expires_at=None)
    if updated != 1:
        row = Run.objects.filter(run_id=run_id).values("lease_epoch", "last_seq").first()
        if row is None:
            raise RunNotFound(run_id)
        raise StaleEpoch(run_id=run_id, epoch=epoch, current_epoch=row["lease_epoch"], last_seq=row["last_seq"], released=row["lease_epoch"] == epoch)
    lease_record(run_id=run_id, kind="released", epoch=epoch)


# Several leases given up in one statement, their records written in the order given.
_PG_RELEASE_MANY = """
WITH upd AS (
    UPDATE reckon_run r SET lease_holder = '', lease_expires_at = NULL
      FROM unnest(%(run_ids)s::text[], %(epochs)s::bigint[]) WITH ORDINALITY AS t(run_id, epoch, n)
     WHERE r.run_id = t.run_id AND r.lease_epoch = t.epoch AND r.lease_holder <> ''
 RETURNING r.run_id, r.lease_epoch, t.n
), rec AS (
    INSERT INTO reckon_lease_record (run_id, kind, epoch, holder, detail, at)
    SELECT run_id, 'released', lease_epoch, '', '', now() FROM upd ORDER BY n
)
SELECT run_id FROM upd
"""


def leases_release(leases: list[tuple[str, int]]) -> None:
    """``lease_release`` for each (run id, epoch), on PostgreSQL in one statement (a reconciliation
    group gives up to twenty leases back in its commit). A lease that statement could not release
    goes through ``lease_release``, which raises what it raises for it (StaleEpoch, RunNotFound)."""
    if not leases:
        return
    left = leases
    if connection.vendor == "postgresql" and len(leases) > 1:
        done = {r for (r,) in _pg(_PG_RELEASE_MANY, {"run_ids": [r for r, _ in leases], "epochs": [e for _, e in leases]})}
        left = [(r, e) for r, e in leases if r not in done]
    for run_id, epoch in left:
        lease_release(run_id=run_id, epoch=epoch)


def db_now() -> datetime:
    """The database clock, the one every lease expiry is judged by."""
    with connection.cursor() as cur:
        if connection.vendor == "postgresql":
            cur.execute("SELECT now()")
            return cur.fetchone()[0]
        cur.execute("SELECT STRFTIME('%Y-%m-%d %H:%M:%f', 'NOW')")
        return datetime.fromisoformat(cur.fetchone()[0]).replace(tzinfo=timezone.utc)
