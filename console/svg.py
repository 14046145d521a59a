"""Server-side SVG charts: a multi-series line chart and a bar chart, no JavaScript.

Each chart is a complete ``<svg role="img">`` with a <title> and a <desc>, and the screen shows the
same numbers in a table beside it, so nothing depends on seeing the picture. All text is escaped.
"""

from __future__ import annotations

import math

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

# Colours chosen to stay distinguishable for the common forms of colour blindness (Okabe-Ito).
PALETTE = {
    "irreversible": "#D55E00",
    "reversible": "#E69F00",
    "idempotent": "#0072B2",
    "read_only": "#009E73",
}
_FALLBACK = ("#CC79A7", "#56B4E9", "#F0E442", "#000000")


def _colour(name: str, i: int) -> str:
    return PALETTE.get(name, _FALLBACK[i % len(_FALLBACK)])


def nice_ticks(value: float, *, most: int = 6) -> list[int]:
    """Axis ticks from 0 up to at least ``value`` in steps of 1, 2 or 5 times a power of ten, at
    most ``most`` of them: 0/20/40/60/80 for 70, 0/5/10/15/20 for 17. Counts are whole numbers,
    so the step is never below 1 and every label is exact."""
    value = max(float(value), 1.0)
    magnitude = 1
    while True:
        for m in (1, 2, 5):
            step = m * magnitude
            n = math.ceil(value / step)
            if n + 1 <= most:
                return [step * i for i in range(n + 1)]
        magnitude *= 10


def _anchor(i: int, last: int) -> str:
    # The first and last x labels are anchored at their ends so they stay inside the picture.
    return "start" if i == 0 else "end" if i == last else "middle"


def _label_x(i: int, last: int, x: float) -> str:
    return f'x="{x:.1f}" text-anchor="{_anchor(i, last)}"'


# A label's width, estimated from its length: wider than system-ui's digits and lower-case letters
# (about 0.55 em) so that a capital ("Nov", "Sep") does not make two labels touch.
_EM_PER_CHAR = 0.65


def x_labels_shown(labels: list[str], x, font_size: int) -> list[int]:
    """The x labels drawn: every step-th, starting with a step that keeps about 6 and widened until
    no two of them touch (at ``font_size``, a gap of half a letter between them), and always the
    last (now, or the last day), dropping the regular labels before it that it would touch. The
    chart scales as a whole, so labels apart in the picture stay apart at any width."""
    last = len(labels) - 1
    if last < 0:
        return []
    gap = font_size * 0.6

    def span(i: int) -> tuple[float, float]:
        width, anchor = len(labels[i]) * font_size * _EM_PER_CHAR, _anchor(i, last)
        left = x(i) - (0 if anchor == "start" else width if anchor == "end" else width / 2)
        return left, left + width

    def apart(a: int, b: int) -> bool:
        return span(a)[1] + gap <= span(b)[0]

    step = max(1, math.ceil(len(labels) / 6))
    while True:
        shown = list(range(0, last + 1, step))
        if step > last or all(apart(a, b) for a, b in zip(shown, shown[1:])):
            break
        step += 1
    if shown[-1] != last:
        shown.append(last)
    while len(shown) > 1 and not apart(shown[-2], last):
        del shown[-2]
    return shown


def line_chart(*, labels: list[str], series: dict[str, list[int]], title: str, width: int = 640, height: int = 240, font_size: int = 11, colours: dict[str, str] | None = None) -> SafeString:
    """One polyline per series over the shared x labels (oldest left); a legend names each series.
    A chart meant to stay readable when a phone scales it down is drawn narrower with a larger
    ``font_size``; ``colours`` names a colour per series where the palette's names do not fit."""
    pad_l, pad_r, pad_t, pad_b = 48, 12, 16, 46
    w, h = width - pad_l - pad_r, height - pad_t - pad_b
    ticks = nice_ticks(max([max(v) for v in series.values() if v] + [0]))
    top = ticks[-1]
    n = max(len(labels), 2)

    def x(i: int) -> float:
        return pad_l + w * i / (n - 1)

    def y(v: float) -> float:
        return pad_t + h - h * v / top

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" aria-labelledby="lc-t lc-d">',
        f'<title id="lc-t">{escape(title)}</title>',
        f'<desc id="lc-d">{escape(_describe(labels, series))}</desc>',
        f'<g font-family="system-ui, sans-serif" font-size="{font_size}" fill="#57606a">',
    ]
    for v in ticks:
        parts.append(f'<line x1="{pad_l}" x2="{pad_l + w}" y1="{y(v):.1f}" y2="{y(v):.1f}" class="grid-line" stroke="#d0d7de" stroke-width="1"/>')
        parts.append(f'<text class="y-tick" x="{pad_l - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:,}</text>')
    last = len(labels) - 1
    for i in x_labels_shown(labels, x, font_size):
        parts.append(f'<text class="x-tick" {_label_x(i, last, x(i))} y="{pad_t + h + 16}">{escape(labels[i])}</text>')
    parts.append("</g>")
    for i, (name, values) in enumerate(series.items()):
        pts = " ".join(f"{x(j):.1f},{y(v):.1f}" for j, v in enumerate(values))
        colour = (colours or {}).get(name) or _colour(name, i)
        dash = ' stroke-dasharray="5 3"' if i % 2 else ""
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2.5"{dash} points="{pts}"><title>{escape(name)}</title></polyline>')
        lx = pad_l + i * 140
        parts.append(f'<line x1="{lx}" x2="{lx + 18}" y1="{height - 10}" y2="{height - 10}" stroke="{colour}" stroke-width="3"{dash}/>')
        parts.append(f'<text x="{lx + 22}" y="{height - 6}" font-family="system-ui, sans-serif" font-size="{font_size + 1}" fill="#1b1f24">{escape(name)}</text>')
    parts.append("</svg>")
    return mark_safe("".join(parts))


def bar_chart(*, bars: list[tuple[str, int]], title: str, width: int = 640, height: int = 220, colour: str = "#0072B2") -> SafeString:
    """Vertical bars with their count written above each, labels below."""
    pad_l, pad_r, pad_t, pad_b = 40, 12, 20, 34
    w, h = width - pad_l - pad_r, height - pad_t - pad_b
    ticks = nice_ticks(max([c for _, c in bars] + [0]))
    top = ticks[-1]
    slot = w / max(len(bars), 1)
    bw = slot * 0.7
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" aria-labelledby="bc-t bc-d">',
        f'<title id="bc-t">{escape(title)}</title>',
        f'<desc id="bc-d">{escape("; ".join(f"{label}: {c}" for label, c in bars))}</desc>',
        '<g font-family="system-ui, sans-serif" font-size="11" fill="#57606a">',
        f'<line x1="{pad_l}" x2="{pad_l + w}" y1="{pad_t + h}" y2="{pad_t + h}" stroke="#8c959f"/>',
    ]
    for i, (label, count) in enumerate(bars):
        bh = h * count / top
        x0 = pad_l + i * slot + (slot - bw) / 2
        parts.append(f'<rect x="{x0:.1f}" y="{pad_t + h - bh:.1f}" width="{bw:.1f}" height="{bh:.1f}" fill="{colour}"><title>{escape(label)}: {count}</title></rect>')
        parts.append(f'<text x="{x0 + bw / 2:.1f}" y="{pad_t + h - bh - 4:.1f}" text-anchor="middle" fill="#1b1f24">{count}</text>')
        parts.append(f'<text x="{x0 + bw / 2:.1f}" y="{pad_t + h + 16}" text-anchor="middle">{escape(label)}</text>')
    parts.append("</g></svg>")
    return mark_safe("".join(parts))


def _describe(labels: list[str], series: dict[str, list[int]]) -> str:
    if not labels:
        return "no data"
    return "; ".join(f"{name}: {values[0] if values else 0} at {labels[0]}, {values[-1] if values else 0} at {labels[-1]}, peak {max(values or [0])}" for name, values in series.items())
