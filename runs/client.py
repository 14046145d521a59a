"""The in-process transport of the agent client (``reckon_client``): the same run, invoke path,
renewal and close as an agent outside Reckon uses, over the store instead of the HTTP API.

    from reckon_client import ToolCall, open_run
    from runs.client import StoreTransport

    with open_run("run-q3-recon", transport=StoreTransport()) as run:
        run.invoke(ToolCall.new("post_correction", {"account": "C-771"}), post_correction)

The demo agent, the benchmarks and the tests use it inside Reckon (the caller has set up Django).
It does what the HTTP API does for an agent's request, and no more: it refuses a run id or an event
type an agent may not write before anything is written (``runs.run_ids``, ``runs.events.WRITER``),
and speaks the client's ``LeaseHeld`` and ``StaleEpoch`` where the run's lease is taken and renewed.
``opened`` folds from the current snapshot plus its tail (``runs.snapshots.run_state_fast``), so the
run's ``state`` is the server's full fold: the same as a full replay, only cheaper for a long run.
"""

from __future__ import annotations

import reckon_client.errors as client_errors

from runs.errors import FenceError, LeaseHeld, RunFinished, SeqConflict, StaleEpoch
from runs.events import agent_events_check
from runs.fold import Event, RunState
from runs.run_ids import run_id_check


class StoreTransport:
    """In-process: ``runs.leases`` and ``runs.store`` directly."""

    def acquire(self, run_id, holder, ttl, tenant):
        from runs.leases import lease_acquire

        run_id_check(run_id)  # refused here, before any write, with the rule stated (runs.run_ids)
        try:
            lease = lease_acquire(run_id=run_id, holder=holder, ttl_seconds=ttl)
        except LeaseHeld as exc:
            raise client_errors.LeaseHeld(str(exc), run_id=run_id, holder=exc.holder, epoch=0, expires_at=exc.expires_at) from exc
        if tenant:
            from runs.tenants import run_tenant_claim

            run_tenant_claim(run_id=run_id, tenant=tenant)
        return lease

    def renew(self, run_id, epoch, ttl):
        from runs.leases import lease_renew

        try:
            return lease_renew(run_id=run_id, epoch=epoch, ttl_seconds=ttl)
        except FenceError as exc:
            raise _client_fence_error(exc) from exc

    def release(self, run_id, epoch):
        from runs.leases import lease_release

        lease_release(run_id=run_id, epoch=epoch)

    _store = None  # (NewEvent, events_append): imported at the first append, once Django is set up

    def append(self, run_id, epoch, expected_seq, events) -> list[Event]:
        # An agent writes agent facts only: the HTTP API refuses the rest with 403, and this
        # transport, which writes to the store directly, by the same table.
        agent_events_check((d["type"], d["payload"]) for d in events)
        # Not an import per append: it cost a few microseconds between two commits, on every one.
        if StoreTransport._store is None:
            from runs.store import NewEvent, events_append

            StoreTransport._store = (NewEvent, events_append)
        new_event, events_append = StoreTransport._store
        try:
            return events_append(run_id=run_id, epoch=epoch, expected_seq=expected_seq, events=[new_event(e["type"], e["payload"]) for e in events])
        except FenceError as exc:
            raise _client_fence_error(exc) from exc

    def opened(self, run_id) -> tuple[RunState, list[dict]]:
        # The stale observations are the list the HTTP API's state carries: completed reads older
        # than their fresh_for. Any snapshot miss falls back to the full replay.
        from runs.freshness import stale_observations
        from runs.snapshots import run_state_fast

        state = run_state_fast(run_id)
        return state, (stale_observations(run_id=run_id, state=state) if state.last_seq else [])

    def close_thread(self):
        from django.db import connection

        connection.close()


_FENCE_ERRORS = {StaleEpoch: client_errors.StaleEpoch, SeqConflict: client_errors.SeqConflict, RunFinished: client_errors.RunFinished}


def _client_fence_error(exc: FenceError) -> client_errors.FenceError:
    """The client's error for a refusal of the run's fence, the class the HTTP transport raises for it."""
    cls = _FENCE_ERRORS.get(type(exc), client_errors.FenceError)
    return cls(str(exc), run_id=exc.run_id, current_epoch=exc.current_epoch, last_seq=exc.last_seq)
