"""Previous and next links for the console's keyset-paged lists.

A keyset cursor only leads forward, so each page's address carries the trail of cursors that led
to it (``trail``: the earlier pages' cursors, dot-separated; cursors are URL-safe base64 and never
hold a dot). "Previous" drops the last one; "next" adds the current one. The page number is the
trail's length plus one.
"""

from __future__ import annotations


MAX_TRAIL = 200  # pages back a link can remember; deeper than that, "previous" starts over at the first


FIRST = "~"  # the first page's place in a trail (it has no cursor)


def trail_parse(text: str, *, after: str | None) -> list[str]:
    """The cursors of the pages before this one (``FIRST`` for the first page). ValueError when a
    trail is given without the cursor of the page it leads to."""
    parts = text.split(".") if text else []
    if parts and not after:
        raise ValueError("trail is only meaningful with after, the cursor of the page it leads to")
    if any(not p or len(p) > 400 for p in parts):
        raise ValueError("trail must be the cursors of earlier pages separated by dots, as this list's links give it")
    return parts[-MAX_TRAIL:]


def _href(request, cursor_name: str, cursor: str | None, trail: list[str]) -> str:
    q = request.GET.copy()
    for k in (cursor_name, "trail"):
        q.pop(k, None)
    if cursor and cursor != FIRST:
        q[cursor_name] = cursor
        if trail:
            q["trail"] = ".".join(trail)
    text = q.urlencode()
    return f"?{text}" if text else "?"


def pages_link(page, request, *, trail: list[str], size: int, cursor_name: str) -> None:
    """Attach ``number`` (None when unknown: an address without its trail), ``prev_href``,
    ``next_href`` and ``pages`` (the count of pages, when the page's ``count`` is exact) to ``page``."""
    current = request.GET.get(cursor_name) or None
    page.number = (len(trail) + 1 if trail else None) if current else 1
    page.prev_href = None
    if current:
        page.prev_href = _href(request, cursor_name, trail[-1] if trail else None, trail[:-1])
    page.next_href = _href(request, cursor_name, page.next_cursor, [*trail, current or FIRST]) if page.next_cursor else None
    count = getattr(page, "count", None)
    page.pages = -(-count // size) if count is not None and getattr(page, "count_exact", False) else None
