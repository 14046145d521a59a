"""Keyset paging: one page type and one cursor codec for every list that pages (the queue, the
decision log, runs over the API).

A cursor is the sort key of the last row shown, as an opaque token: the values as a JSON list,
base64url-encoded, so a run id with any character in it survives a URL. ``cursor_decode`` checks
the token against the kinds the list expects and raises ``CursorError`` (a ValueError naming what
is wrong) for anything a list did not hand out: a bookmark from another list, an edited token, a
NUL byte, a date out of range. A list that pages on one plain value (a seq, a run id) may use it as
it is.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Generic, TypeVar

T = TypeVar("T")
MAX_CURSOR = 1024  # far beyond any cursor a list hands out


class CursorError(ValueError):
    """A cursor that is not one this list returned."""


@dataclass
class Page(Generic[T]):
    items: list[T]
    next_cursor: Any = None  # pass back for the following page; None on the last


def cursor_encode(*values: int | str | datetime) -> str:
    """The opaque cursor for a row whose sort key is ``values`` (datetimes are kept in UTC)."""
    doc = [v.astimezone(timezone.utc).isoformat() if isinstance(v, datetime) else v for v in values]
    return base64.urlsafe_b64encode(json.dumps(doc, separators=(",", ":")).encode()).decode().rstrip("=")


def cursor_decode(text: str, kinds: tuple[type, ...]) -> tuple:
    """``cursor_encode``'s values back, each of the kind ``kinds`` names, or CursorError."""
    if not isinstance(text, str) or not text or len(text) > MAX_CURSOR:
        raise CursorError("the cursor is empty or too long")
    try:
        doc = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode())
    except (ValueError, UnicodeError):
        raise CursorError("the cursor does not decode") from None
    if not isinstance(doc, list) or len(doc) != len(kinds):
        raise CursorError("the cursor has the wrong shape")
    out = []
    for value, kind in zip(doc, kinds):
        if kind is datetime:
            try:
                value = datetime.fromisoformat(value)
            except (TypeError, ValueError, OverflowError):
                raise CursorError("the cursor's time does not parse") from None
            if value.tzinfo is None:
                raise CursorError("the cursor's time has no zone")
        elif kind is int:
            if isinstance(value, bool) or not isinstance(value, int) or not -(2**63) <= value < 2**63:
                raise CursorError("the cursor's number is not a 64-bit whole number")
        elif not isinstance(value, kind) or (isinstance(value, str) and "\x00" in value):
            raise CursorError(f"the cursor's value is not a {kind.__name__}")
        out.append(value)
    return tuple(out)
