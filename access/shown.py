"""A payload or state document as a page shows it: JSON, indented, cut at ``SHOWN_CHARS``.

Every screen and report that prints a payload whole goes through ``json_shown``, so a page's size
follows how many payloads it shows, never how large one is (an event may hold
RECKON_MAX_EVENT_BYTES, a folded state as much as its run). The text is encoded piece by piece and
the encoding stops once the cut is reached: a large state is never turned into one large string.
Each caller says where the rest is (the event's JSON link, the bundle's events.jsonl).
"""

from __future__ import annotations

import json

SHOWN_CHARS = 10_000


def json_shown(value, *, indent: int = 2, limit: int = SHOWN_CHARS) -> tuple[str, bool]:
    """(text, cut): ``value`` as indented JSON (a string as itself), at most ``limit`` characters;
    ``cut`` tells whether there was more."""
    if isinstance(value, str):
        return (value[:limit], True) if len(value) > limit else (value, False)
    parts, n = [], 0
    for piece in json.JSONEncoder(ensure_ascii=False, indent=indent, sort_keys=True).iterencode(value):
        parts.append(piece)
        n += len(piece)
        if n > limit:
            return "".join(parts)[:limit], True
    return "".join(parts), False


def cut_note(limit: int = SHOWN_CHARS) -> str:
    return f"\n… cut here: only the first {limit:,} characters are shown"
