"""Line and step charts as SVG text: the simulator's plots without a plotting library. Pure.

``chart_svg`` turns a few series into one SVG document (axes, ticks at 1-2-5 steps or at decades on a
log axis, a light grid, a legend, a title), the same three pictures ``write_plots`` used to draw with
matplotlib. Importing matplotlib's Agg stack takes about as long as a whole 10,000-job replay's rounds,
and SVG needs no rasterising: browsers, editors and GitHub show it, and it stays sharp when zoomed.
Series are thinned to at most ``max_points`` points (every point of a short series is kept; a long one
keeps evenly spaced points and its last), which keeps files small without changing the picture at this
size.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass

#: matplotlib's default colour cycle (tab10), so the pictures look as they did
COLOURS = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)


@dataclass(frozen=True, slots=True)
class Series:
    """One line: ``x`` and ``y`` of equal length; ``step``: hold each value until the next x."""

    label: str
    x: Sequence[float]
    y: Sequence[float]
    step: bool = False


def escape(text: str) -> str:
    """``text`` safe inside an SVG element (``&``, ``<``, ``>`` escaped)."""
    return html.escape(text, quote=False)


def _nice_ticks(lo: float, hi: float, want: int = 6) -> list[float]:
    """Ticks at a 1, 2 or 5 x 10^k step covering [lo, hi], about ``want`` of them."""
    if not hi > lo:
        return [lo]
    raw = (hi - lo) / max(1, want)
    mag = 10.0 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1.0, 2.0, 5.0, 10.0) if m * mag >= raw)
    first = math.ceil(lo / step - 1e-9)
    last = math.floor(hi / step + 1e-9)
    return [k * step for k in range(first, last + 1)]


def _label(v: float) -> str:
    """A tick label: no trailing zeros, powers of ten below 0.01 or from 1e6 in e-notation."""
    if v == 0:
        return "0"
    if abs(v) < 0.01 or abs(v) >= 1e6:
        return f"{v:.0e}".replace("e-0", "e-").replace("e+0", "e").replace("e+", "e")
    return f"{v:.6g}"


def _thin(x: Sequence[float], y: Sequence[float], max_points: int) -> tuple[list[float], list[float]]:
    n = len(x)
    if n <= max_points:
        return list(x), list(y)
    idx = sorted({round(i * (n - 1) / (max_points - 1)) for i in range(max_points)})
    return [x[i] for i in idx], [y[i] for i in idx]


def _finite(
    x: Sequence[float], y: Sequence[float], *, positive_x: bool
) -> tuple[Sequence[float], Sequence[float]]:
    """The points with finite coordinates (and x > 0 with ``positive_x``), in order. A series whose sums
    are finite has no infinite or NaN value, so it comes through as it is, without a test per point
    (the utilisation and queue series have a point per round: some 25,000 on the Philly 10k replay)."""
    if math.isfinite(sum(x)) and math.isfinite(sum(y)) and (not positive_x or min(x, default=1.0) > 0):
        return x, y
    pts = [(a, b) for a, b in zip(x, y, strict=True) if math.isfinite(a) and math.isfinite(b)]
    if positive_x:
        pts = [(a, b) for a, b in pts if a > 0]
    return [a for a, _ in pts], [b for _, b in pts]


def chart_svg(
    series: Sequence[Series],
    *,
    title: str,
    xlabel: str,
    ylabel: str,
    xlog: bool = False,
    width: int = 770,
    height: int = 440,
    max_points: int = 2000,
) -> str:
    """One SVG document drawing ``series`` on shared axes (``xlog``: a log-scale x axis, x > 0 only)."""
    left, right, top, bottom = 70, 25, 40, 55
    pw, ph = width - left - right, height - top - bottom
    lines: list[tuple[Series, list[float], list[float]]] = []
    for s in series:
        if len(s.x) != len(s.y):
            raise ValueError(f"series {s.label!r}: {len(s.x)} x values but {len(s.y)} y values")
        xs_all, ys_all = _finite(s.x, s.y, positive_x=xlog)
        if xs_all:
            xs, ys = _thin(xs_all, ys_all, max_points)
            lines.append((s, xs, ys))
    all_x = [v for _, xs, _ in lines for v in xs]
    all_y = [v for _, _, ys in lines for v in ys]
    x_lo, x_hi = (min(all_x), max(all_x)) if all_x else (1.0, 10.0)
    y_lo, y_hi = (min(0.0, min(all_y)), max(all_y)) if all_y else (0.0, 1.0)
    if xlog:
        # a little room beyond the data, as for y; ticks at the decades inside
        x_lo, x_hi = x_lo / 1.5, x_hi * 1.5
        first, last = math.ceil(math.log10(x_lo)), math.floor(math.log10(x_hi))
        xt = [10.0**k for k in range(first, last + 1)]
    else:
        if x_hi <= x_lo:
            x_hi = x_lo + 1.0
        xt = [v for v in _nice_ticks(x_lo, x_hi) if x_lo <= v <= x_hi]
    if y_hi <= y_lo:
        y_hi = y_lo + 1.0
    y_hi += 0.04 * (y_hi - y_lo)  # a little headroom so the top of a line is not on the frame
    yt = [v for v in _nice_ticks(y_lo, y_hi) if y_lo <= v <= y_hi]

    def px(v: float) -> float:
        f = (
            (math.log10(v) - math.log10(x_lo)) / (math.log10(x_hi) - math.log10(x_lo))
            if xlog
            else ((v - x_lo) / (x_hi - x_lo))
        )
        return left + f * pw

    def py(v: float) -> float:
        return top + ph - (v - y_lo) / (y_hi - y_lo) * ph

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="DejaVu Sans, Arial, sans-serif" font-size="11">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{left + pw / 2:.1f}" y="24" text-anchor="middle" font-size="13">{escape(title)}</text>',
    ]
    for v in xt:
        x = px(v)
        out.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + ph}" stroke="#ddd"/>')
        out.append(f'<text x="{x:.1f}" y="{top + ph + 16}" text-anchor="middle">{_label(v)}</text>')
    for v in yt:
        y = py(v)
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + pw}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{_label(v)}</text>')
    out.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="black"/>')
    out.append(
        f'<text x="{left + pw / 2:.1f}" y="{height - 14}" text-anchor="middle">{escape(xlabel)}</text>'
    )
    out.append(
        f'<text transform="translate(18 {top + ph / 2:.1f}) rotate(-90)" text-anchor="middle">'
        f"{escape(ylabel)}</text>"
    )
    for i, (s, xs, ys) in enumerate(lines):
        cmds = [f"M{px(xs[0]):.1f} {py(ys[0]):.1f}"]
        for k in range(1, len(xs)):
            if s.step:
                cmds.append(f"H{px(xs[k]):.1f}V{py(ys[k]):.1f}")
            else:
                cmds.append(f"L{px(xs[k]):.1f} {py(ys[k]):.1f}")
        colour = COLOURS[i % len(COLOURS)]
        out.append(f'<path d="{"".join(cmds)}" fill="none" stroke="{colour}" stroke-width="1.2"/>')
    if lines:
        box_w = 30 + 7 * max(len(s.label) for s, _, _ in lines)
        out.append(
            f'<rect x="{left + 8}" y="{top + 8}" width="{box_w}" height="{8 + 15 * len(lines)}" '
            f'fill="white" fill-opacity="0.85" stroke="#ccc"/>'
        )
        for i, (s, _, _) in enumerate(lines):
            y = top + 20 + 15 * i
            colour = COLOURS[i % len(COLOURS)]
            out.append(
                f'<line x1="{left + 13}" y1="{y - 4}" x2="{left + 27}" y2="{y - 4}" stroke="{colour}" '
                f'stroke-width="2"/><text x="{left + 31}" y="{y}">{escape(s.label)}</text>'
            )
    out.append("</svg>")
    return "\n".join(out) + "\n"
