"""The recovery engine's refusals; each message is fit for an operator. The API maps each to a status once (api.errors).
"""

from __future__ import annotations


class RecoveryError(Exception):
    """Base of the recovery engine's refusals; the message is fit for an operator."""

class CallNotFound(RecoveryError):
    def __init__(self, pk):
        super().__init__(f"uncertain call {pk!r} does not exist")

class StaleDecision(RecoveryError):
    """The call changed since the person looked at it: nothing was written."""

    def __init__(self, *, pk, seen_version, version, state):
        self.pk, self.seen_version, self.version, self.state = pk, seen_version, version, state
        super().__init__(
            f"uncertain call {pk} changed since you saw it (you saw version {seen_version}, it is now version {version}, "
            f"state {state}); reload it and decide again"
        )

class InvalidDecision(RecoveryError):
    pass

class NotDecidable(RecoveryError):
    """A person may not decide the call in its current state (``UncertainCall.decidable``): in
    flight or already resolved. Nothing was written; the message is the reason."""

    def __init__(self, *, pk, state, reason: str):
        self.pk, self.state, self.reason = pk, state, reason
        super().__init__(reason)

class RunBusy(RecoveryError):
    """Another owner (the agent, another worker) holds the run's lease right now."""
