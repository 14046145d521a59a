"""The overview's charts: axis ticks in 1-2-5 steps with exact labels, and x labels inside the picture."""

import re

from console.svg import bar_chart, line_chart, nice_ticks


def test_ticks_step_by_one_two_or_five_times_a_power_of_ten():
    assert nice_ticks(70) == [0, 20, 40, 60, 80]
    assert nice_ticks(17) == [0, 5, 10, 15, 20]
    assert nice_ticks(3) == [0, 1, 2, 3]
    assert nice_ticks(0) == [0, 1]
    assert nice_ticks(1234) == [0, 500, 1000, 1500]
    assert nice_ticks(100) == [0, 20, 40, 60, 80, 100]
    for v in (1, 7, 33, 99, 101, 4999, 123456):
        t = nice_ticks(v)
        step = t[1] - t[0]
        assert t[-1] >= v and len(t) <= 6 and re.fullmatch(r"[125]0*", str(step)), (v, t)


def test_the_line_chart_prints_exact_tick_labels_and_keeps_every_x_label_inside():
    labels = [f"{h:02d}:00" for h in range(25)]
    svg = line_chart(labels=labels, series={"irreversible": [70] * 25, "reversible": [3] * 25}, title="t")
    assert re.findall(r'class="y-tick"[^>]*>([^<]*)<', svg) == ["0", "20", "40", "60", "80"]
    width = 640
    xs = re.findall(r'class="x-tick" x="([\d.]+)" text-anchor="(\w+)"[^>]*>([^<]*)<', svg)
    assert xs[-1][2] == "24:00" and xs[-1][1] == "end" and xs[0][1] == "start"
    for x, anchor, text in xs:
        half = len(text) * 3.5  # 11 px digits are about 7 px wide
        left = float(x) - (0 if anchor == "start" else 2 * half if anchor == "end" else half)
        assert 0 <= left and left + 2 * half <= width, (x, anchor, text)
    gaps = [float(b[0]) - float(a[0]) for a, b in zip(xs, xs[1:])]
    assert min(gaps) >= 50, gaps  # no two labels touch


def test_the_bar_chart_scales_to_a_nice_top():
    svg = bar_chart(bars=[("a", 17), ("b", 3)], title="t")
    assert ">17</text>" in svg
