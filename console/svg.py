"""Server-side SVG charts: a multi-series line chart and a bar chart, no JavaScript.

Each chart is a complete ``<svg role="img">`` with a <title> and a <desc>, and the screen shows the
same numbers in a table beside it, so nothing depends on seeing the picture. All text is escaped.
"""

from __future__ import annotations

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


def _nice_max(value: float) -> int:
    if value <= 5:
        return 5
    step = 10 ** (len(str(int(value))) - 1)
    return int(((value // step) + 1) * step)


def line_chart(*, labels: list[str], series: dict[str, list[int]], title: str, width: int = 640, height: int = 240) -> SafeString:
    """One polyline per series over the shared x labels (oldest left); a legend names each series."""
    pad_l, pad_r, pad_t, pad_b = 48, 12, 16, 46
    w, h = width - pad_l - pad_r, height - pad_t - pad_b
    top = _nice_max(max([max(v) for v in series.values() if v] + [0]))
    n = max(len(labels), 2)

    def x(i: int) -> float:
        return pad_l + w * i / (n - 1)

    def y(v: float) -> float:
        return pad_t + h - h * v / top

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" aria-labelledby="lc-t lc-d">',
        f'<title id="lc-t">{escape(title)}</title>',
        f'<desc id="lc-d">{escape(_describe(labels, series))}</desc>',
        '<g font-family="system-ui, sans-serif" font-size="11" fill="#57606a">',
    ]
    for k in range(5):
        v = top * k / 4
        parts.append(f'<line x1="{pad_l}" x2="{pad_l + w}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#d0d7de" stroke-width="1"/>')
        parts.append(f'<text x="{pad_l - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{int(v)}</text>')
    step = max(1, len(labels) // 6)
    for i, label in enumerate(labels):
        if i % step == 0 or i == len(labels) - 1:
            parts.append(f'<text x="{x(i):.1f}" y="{pad_t + h + 16}" text-anchor="middle">{escape(label)}</text>')
    parts.append("</g>")
    for i, (name, values) in enumerate(series.items()):
        pts = " ".join(f"{x(j):.1f},{y(v):.1f}" for j, v in enumerate(values))
        colour = _colour(name, i)
        dash = ' stroke-dasharray="5 3"' if i % 2 else ""
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2.5"{dash} points="{pts}"><title>{escape(name)}</title></polyline>')
        lx = pad_l + i * 140
        parts.append(f'<line x1="{lx}" x2="{lx + 18}" y1="{height - 10}" y2="{height - 10}" stroke="{colour}" stroke-width="3"{dash}/>')
        parts.append(f'<text x="{lx + 22}" y="{height - 6}" font-family="system-ui, sans-serif" font-size="12" fill="#1b1f24">{escape(name)}</text>')
    parts.append("</svg>")
    return mark_safe("".join(parts))


def bar_chart(*, bars: list[tuple[str, int]], title: str, width: int = 640, height: int = 220, colour: str = "#0072B2") -> SafeString:
    """Vertical bars with their count written above each, labels below."""
    pad_l, pad_r, pad_t, pad_b = 40, 12, 20, 34
    w, h = width - pad_l - pad_r, height - pad_t - pad_b
    top = _nice_max(max([c for _, c in bars] + [0]))
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
