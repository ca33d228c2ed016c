"""Names beside points, placed where they overlap neither each other nor a point."""

from __future__ import annotations

import logging
import math
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backend_bases import RendererBase
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.text import Annotation
from matplotlib.transforms import Bbox

from seq2final.reporting.plots.look import LABEL_FONTSIZE, method_style

log = logging.getLogger(__name__)


_LABEL_RADII = (6.0, 10.0, 15.0, 22.0, 30.0, 40.0, 52.0, 66.0, 82.0)  # points
_LABEL_ANGLES = tuple(np.deg2rad(a) for a in (45, 135, -45, -135, 90, -90, 0, 180,
                                               22, 158, -22, -158, 68, 112, -68, -112))  # fmt: skip
_POINT_RADIUS = 5.0  # points around a marker no label may cover
_MERGE = 7.0  # points: markers closer than this share one label
_LEADER = 10.0  # points: a label farther from its point than this gets a leader line


@dataclass
class _Cluster:
    """Points drawn on one spot: named together, where the first of them lies."""

    x: float
    y: float
    names: list[str]
    colours: list[str]

    def text(self) -> str:
        return textwrap.fill(", ".join(self.names), 26)

    def colour(self) -> str:
        return self.colours[0] if len(set(self.colours)) == 1 else "#333333"


def _clusters(
    axis: Axes, points: Sequence[tuple[float, float, str]], colours: Mapping[str, str]
) -> list[_Cluster]:
    """Points (x, y, name) merged where their markers overlap on screen: fifteen methods on one
    spot get one label listing them, not fifteen labels stacked on each other. A name is drawn
    in its method's colour, or in ``colours``' for a name that is no method (a spot's tag)."""
    to_pixels = axis.transData.transform
    merge = _MERGE * axis.figure.dpi / 72
    clusters: list[_Cluster] = []
    anchors: list[np.ndarray] = []
    for x, y, name in points:
        if not (np.isfinite(x) and np.isfinite(y)):
            continue
        where = to_pixels((x, y))
        near = next((i for i, a in enumerate(anchors) if np.hypot(*(a - where)) <= merge), None)
        if near is None:
            clusters.append(
                _Cluster(x, y, [name], [colours.get(name) or method_style(name).colour])
            )
            anchors.append(where)
        elif name not in clusters[near].names:
            clusters[near].names.append(name)
            clusters[near].colours.append(colours.get(name) or method_style(name).colour)
    return clusters


def _overlaps(box: Bbox, boxes: Sequence[Bbox]) -> bool:
    return any(box.overlaps(other) for other in boxes)


def _place_labels(
    panels: Sequence[tuple[Axes, Sequence[tuple[float, float, str]]]],
    fontsize: float = LABEL_FONTSIZE,
    lines: Mapping[Axes, Sequence[tuple[float, float]]] | None = None,
    paths: Mapping[Axes, Sequence[Sequence[tuple[float, float]]]] | None = None,
    leaders: bool = True,
    colours: Mapping[str, str] | None = None,
) -> list[Annotation]:
    """Name each point (x, y, name) of each panel (or group of coincident points) beside it,
    where the name overlaps no other name, no marker, no leader line and stays inside the axes:
    candidate spots on rings of growing radius around the point, the first free one taken, a
    thin leader line from the farther rings. A name with no free spot is left out (the figure's
    legend still lists it) rather than drawn over another. Call it last, once for the figure:
    it lays the figure out once (legend and titles in place) and reads positions from that
    layout, and the labels it adds stay out of the layout so the axes do not move after.
    ``lines``: a polyline (data coordinates) per axis that names must not cross either (the
    Pareto front); ``paths``: more polylines per axis (a method's path from its start model),
    which names must not cross nor cover. ``leaders=False`` keeps every name next to its point
    (no leader line; a name with no room there is left out). ``colours``: the colour of a name
    that is no method's (a tag standing for several, which the figure explains): such names are
    placed first, with a leader line where they need one, so none is left out.

    A name is never put nearer to another method's marker than to its own point, so it cannot be
    read as the neighbour's name."""
    if not panels:
        return []
    figure = panels[0][0].get_figure(root=True)
    # look.new_figure's: a whole figure on an Agg canvas, whose renderer measures the names
    assert isinstance(figure, Figure) and isinstance(figure.canvas, FigureCanvasAgg)
    figure.draw_without_rendering()
    renderer = figure.canvas.get_renderer()
    lines, paths = lines or {}, paths or {}
    return [
        label
        for axis, points in panels
        for label in _label_axis(
            axis,
            points,
            renderer,
            fontsize,
            [lines.get(axis, ()), *paths.get(axis, ())],
            leaders,
            colours or {},
        )  # fmt: skip
    ]


def _label_axis(
    axis: Axes,
    points: Sequence[tuple[float, float, str]],
    renderer: RendererBase,
    fontsize: float,
    polylines: Sequence[Sequence[tuple[float, float]]],
    leaders: bool,
    colours: Mapping[str, str],
) -> list[Annotation]:
    scale = axis.figure.dpi / 72
    frame = axis.get_window_extent(renderer).padded(-2)
    clusters = _clusters(axis, points, colours)
    radius = _POINT_RADIUS * scale
    markers = [
        Bbox.from_extents(px - radius, py - radius, px + radius, py + radius)
        for px, py in (axis.transData.transform((x, y)) for x, y, _ in points)
        if np.isfinite(px) and np.isfinite(py)
    ]
    placed: list[Bbox] = []
    segments: list[tuple[tuple[float, float], tuple[float, float]]] = []
    for polyline in polylines:  # the segments no name may cross: the lines', then the leaders
        drawn = [tuple(axis.transData.transform(xy)) for xy in polyline]
        segments += [(a, b) for a, b in zip(drawn, drawn[1:], strict=False)]
        segments += [(a, a) for a in drawn]  # a path's dots, a one-point line included
    centres = [axis.transData.transform((c.x, c.y)) for c in clusters]
    near = tuple(r for r in _LABEL_RADII if r <= _LEADER)
    labels = []
    tagged = [any(n in colours for n in c.names) for c in clusters]
    order = sorted(range(len(clusters)), key=lambda i: (-tagged[i], -len(clusters[i].names), i))
    for index in order:
        cluster = clusters[index]
        rings = _LABEL_RADII if leaders or tagged[index] else near
        px, py = centres[index]
        text = cluster.text()
        probe = axis.annotate(text, (cluster.x, cluster.y), fontsize=fontsize)
        extent = probe.get_window_extent(renderer)
        probe.remove()
        others = [c for i, c in enumerate(centres) if i != index]
        spot = _free_spot(
            (px, py), (extent.width, extent.height), frame, placed, markers, segments, scale,
            others, rings,
        )  # fmt: skip
        if spot is None:
            log.debug("no room for the label %r", text)
            continue
        (dx, dy), ha, va, box, ring = spot
        leader = None
        if ring > _LEADER:
            leader = {"arrowstyle": "-", "color": cluster.colour(), "linewidth": 0.6,
                      "shrinkA": 1, "shrinkB": _POINT_RADIUS * 0.6}  # fmt: skip
            segments.append(((px, py), (box.x0 + box.width / 2, box.y0 + box.height / 2)))
        label = axis.annotate(
            text, (cluster.x, cluster.y), xytext=(dx / scale, dy / scale),
            textcoords="offset points", ha=ha, va=va, fontsize=fontsize, color=cluster.colour(),
            arrowprops=leader, annotation_clip=False,
        )  # fmt: skip
        label.set_in_layout(False)
        placed.append(box)
        labels.append(label)
    return labels


def _free_spot(
    point: tuple[float, float],
    size: tuple[float, float],
    frame: Bbox,
    labels: Sequence[Bbox],
    markers: Sequence[Bbox],
    leaders: Sequence[tuple[tuple[float, float], tuple[float, float]]],
    scale: float,
    others: Sequence[np.ndarray] = (),
    rings: Sequence[float] = _LABEL_RADII,
) -> tuple[tuple[float, float], str, str, Bbox, float] | None:
    """The first spot on the rings around ``point`` (pixels) where a label of ``size`` fits in
    ``frame``, meets no other label, marker or leader line, and its own leader line (drawn from
    the farther rings, from the point to the label's centre) crosses no other label: the offset
    (pixels), alignment, box and ring radius (points). A name without a leader line must lie
    nearer to its own point than to any of ``others`` (the other spots' markers, pixels), or it
    reads as theirs."""
    px, py = point
    width, height = size
    for radius in rings:
        for angle in _LABEL_ANGLES:
            cos, sin = math.cos(angle), math.sin(angle)
            dx, dy = radius * scale * cos, radius * scale * sin
            ha = "left" if cos > 0.3 else "right" if cos < -0.3 else "center"
            va = "bottom" if sin > 0.3 else "top" if sin < -0.3 else "center"
            x0 = px + dx - {"left": 0.0, "center": width / 2, "right": width}[ha]
            y0 = py + dy - {"bottom": 0.0, "center": height / 2, "top": height}[va]
            box = Bbox.from_bounds(x0, y0, width, height)
            padded = box.padded(1.5 * scale)
            if not (frame.contains(box.x0, box.y0) and frame.contains(box.x1, box.y1)):
                continue
            if _overlaps(padded, labels) or _overlaps(padded, markers):
                continue
            if any(_crosses(start, end, padded) for start, end in leaders):
                continue
            centre = (x0 + width / 2, y0 + height / 2)
            if radius > _LEADER and any(_crosses(point, centre, other) for other in labels):
                continue
            own = _distance(box, point)
            if radius <= _LEADER and any(_distance(box, o) <= own + scale for o in others):
                continue
            return (dx, dy), ha, va, box, radius
    return None


def _distance(box: Bbox, point: Sequence[float] | np.ndarray) -> float:
    """From ``point`` to the nearest point of ``box`` (0 inside it), pixels."""
    x, y = point
    return math.hypot(max(box.x0 - x, 0.0, x - box.x1), max(box.y0 - y, 0.0, y - box.y1))


def _crosses(start: tuple[float, float], end: tuple[float, float], box: Bbox) -> bool:
    """Whether the segment start–end meets ``box`` (Liang–Barsky clipping)."""
    (x0, y0), (x1, y1) = start, end
    dx, dy = x1 - x0, y1 - y0
    low, high = 0.0, 1.0
    for p, q in ((-dx, x0 - box.x0), (dx, box.x1 - x0), (-dy, y0 - box.y0), (dy, box.y1 - y0)):
        if p == 0:
            if q < 0:
                return False
            continue
        t = q / p
        if p < 0:
            low = max(low, t)
        else:
            high = min(high, t)
        if low > high:
            return False
    return True
