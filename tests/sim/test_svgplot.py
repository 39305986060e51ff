"""The SVG charts of the simulator's plots: valid XML, ticks where they belong, lines where the data is."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from scheduler.sim.svgplot import Series, _nice_ticks, chart_svg

NS = "{http://www.w3.org/2000/svg}"


def _texts(svg: str) -> list[str]:
    return [t.text or "" for t in ET.fromstring(svg).iter(f"{NS}text")]


@pytest.mark.parametrize(
    ("lo", "hi", "ticks"),
    [
        # range 1.04 (a CDF with headroom): raw step 1.04 / 6 = 0.173 -> 0.2 (the next of 0.1 x 1, 2, 5)
        (0.0, 1.04, [0.0, 0.2, 0.4, 0.6000000000000001, 0.8, 1.0]),
        # range 100: raw step 16.7 -> 20
        (0.0, 100.0, [0.0, 20.0, 40.0, 60.0, 80.0, 100.0]),
        # range 1,300: raw step 217 -> 500 (the next of 100 x 1, 2, 5, 10 at or above it)
        (0.0, 1300.0, [0.0, 500.0, 1000.0]),
        # 3 .. 37: raw step 5.7 -> 10; first tick at or above 3 is 10
        (3.0, 37.0, [10.0, 20.0, 30.0]),
    ],
)
def test_nice_ticks_step_is_1_2_or_5_times_a_power_of_ten(lo: float, hi: float, ticks: list[float]) -> None:
    assert _nice_ticks(lo, hi) == ticks


def test_chart_is_valid_svg_with_title_labels_legend_and_a_path_per_series() -> None:
    svg = chart_svg(
        [Series("srsf", [0, 1, 2], [0.0, 0.5, 1.0]), Series("las <x>", [0, 2], [0.2, 0.4], step=True)],
        title="utilisation & time",
        xlabel="hours",
        ylabel="share",
    )
    root = ET.fromstring(svg)  # escaped: '&' and '<' in labels do not break the XML
    paths = list(root.iter(f"{NS}path"))
    assert len(paths) == 2
    texts = _texts(svg)
    for want in ("utilisation & time", "hours", "share", "srsf", "las <x>"):
        assert want in texts
    # a step series moves horizontally, then vertically: M x0 y0 H x1 V y1
    assert re.fullmatch(r"M[\d.]+ [\d.]+H[\d.]+V[\d.]+", paths[1].get("d", ""))
    # the first series goes up and to the right: SVG y decreases as the value increases
    pts = [tuple(map(float, p.split())) for p in re.findall(r"[ML]([\d.]+ [\d.]+)", paths[0].get("d", ""))]
    assert [x for x, _ in pts] == sorted(x for x, _ in pts) and [y for _, y in pts] == sorted(
        (y for _, y in pts), reverse=True
    )


def test_log_axis_has_decade_ticks_and_drops_values_it_cannot_show() -> None:
    # 0.05 .. 300 h, padded by 1.5x to 0.033 .. 450: decades 0.1 .. 100 inside; the 0 is not on a log axis
    svg = chart_svg([Series("a", [0.0, 0.05, 2.0, 300.0], [0.0, 0.3, 0.6, 1.0])], title="t", xlabel="x",
                    ylabel="y", xlog=True)  # fmt: skip
    texts = _texts(svg)
    assert texts[1:5] == ["0.1", "1", "10", "100"]  # title first, then the x ticks
    d = next(ET.fromstring(svg).iter(f"{NS}path")).get("d", "")
    assert d.count("L") == 2  # three points drawn, the x = 0 one left out


def test_long_series_are_thinned_keeping_both_ends() -> None:
    n = 10_000
    svg = chart_svg([Series("a", list(range(n)), [i / n for i in range(n)])], title="t", xlabel="x",
                    ylabel="y", max_points=500)  # fmt: skip
    d = next(ET.fromstring(svg).iter(f"{NS}path")).get("d", "")
    assert d.count("L") == 499
    plain = chart_svg([Series("a", [0.0, n - 1.0], [0.0, (n - 1) / n])], title="t", xlabel="x", ylabel="y")
    # the thinned line starts and ends where the two-point line does
    ends = re.findall(r"[ML]([\d.]+ [\d.]+)", next(ET.fromstring(plain).iter(f"{NS}path")).get("d", ""))
    assert d.startswith(f"M{ends[0]}") and d.endswith(ends[1])


def test_empty_chart_still_draws_axes_and_mismatched_series_is_one_clear_error() -> None:
    root = ET.fromstring(chart_svg([], title="none", xlabel="x", ylabel="y"))
    assert not list(root.iter(f"{NS}path")) and list(root.iter(f"{NS}rect"))
    with pytest.raises(ValueError, match="series 'a': 3 x values but 2 y values"):
        chart_svg([Series("a", [1, 2, 3], [1, 2])], title="t", xlabel="x", ylabel="y")
