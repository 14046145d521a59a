"""The server's rules of a run's key secret. The key formula itself, the signature and the pairing
rule are the agent client's (``reckon_client.identity``), imported from there by every server module
that computes a key: one copy, which the client and the server share (docs/schema-versions.md).
"""

from __future__ import annotations

import re
import secrets

from reckon_client.identity import KEY_SECRET_FIELD

__all__ = ["KEY_SECRET_FIELD", "KEY_SECRET_RE", "KEY_SECRET_WITHHELD", "key_secret_new", "key_secret_problem"]

KEY_SECRET_RE = re.compile(r"^[0-9a-f]{32,128}$")
# What an export made for a person holds in place of the secret (the masking's own placeholder):
# such a log imports again as "unchanged" where the run is stored, and nowhere else.
KEY_SECRET_WITHHELD = "[masked]"


def key_secret_new() -> str:
    """A fresh per-run key secret: 16 random bytes as 32 lowercase hex digits."""
    return secrets.token_hex(16)


def key_secret_problem(value: object) -> str | None:
    """Why ``value`` cannot be a run's key secret, or None."""
    if isinstance(value, str) and KEY_SECRET_RE.match(value):
        return None
    return f"{KEY_SECRET_FIELD} must be 32 to 128 lowercase hex digits (16 random bytes or more)"
