"""The one keyset cursor codec: what it hands out comes back exactly; anything else is a CursorError."""

from __future__ import annotations

import base64
import json
from datetime import datetime, timezone

import pytest

from runs.paging import MAX_CURSOR, CursorError, cursor_decode, cursor_encode

AT = datetime(2026, 11, 30, 3, 0, 0, 123456, tzinfo=timezone.utc)


def _raw(doc) -> str:
    return base64.urlsafe_b64encode(json.dumps(doc).encode()).decode()


def test_a_cursor_round_trips_its_values_exactly_even_a_run_id_with_any_character():
    text = cursor_encode(AT, 2**40, "run|with.dots&a space/ü")
    assert cursor_decode(text, (datetime, int, str)) == (AT, 2**40, "run|with.dots&a space/ü")
    assert "=" not in text and "/" not in text and "+" not in text  # safe in a URL as it is


@pytest.mark.parametrize(
    "text",
    [
        "",
        "not base64 at all!",
        "x" * (MAX_CURSOR + 1),  # an oversized cursor is refused before it is decoded
        _raw([1, 2]),  # the wrong shape for this list
        _raw(["2026-11-30T03:00:00+00:00", "7", "run"]),  # a number as text
        _raw(["2026-11-30T03:00:00+00:00", True, "run"]),  # a boolean is not a seq
        _raw(["2026-11-30T03:00:00+00:00", 2**64, "run"]),  # beyond 64 bits
        _raw(["99999-01-01T00:00:00+00:00", 1, "run"]),  # a date out of range
        _raw(["2026-11-30T03:00:00", 1, "run"]),  # a time without its zone
        _raw(["2026-11-30T03:00:00+00:00", 1, "run\x00"]),  # a NUL byte
        _raw({"at": 1}),
    ],
)
def test_anything_a_list_did_not_hand_out_is_a_cursor_error(text):
    with pytest.raises(CursorError):
        cursor_decode(text, (datetime, int, str))
