"""Figures: example-image grids, sub-population membership, shift distances, learning curves,
and the paper's figures of finished jobs.

Functions return matplotlib figures and never write files: Kedro's ``MatplotlibDataset`` saves
them, so where figures go is the catalog's business. Figures are built without pyplot
(:func:`_figure`), so a node drawing hundreds of them never leaves one open (pyplot's "More than 20
figures have been opened" cannot appear) and each is freed once the dataset has saved it.

Legibility rules every figure here follows, because a run draws 26 methods and plugins add more:

- a method has one look everywhere (:func:`method_style`: colour × marker, from the registry's
  order), and the artists drawn for it carry its name as ``gid`` (an id in SVG output, and how
  tests find them);
- legends of methods sit outside the axes (constrained layout makes room, nothing is clipped);
- in-plot names are placed where they overlap neither each other nor a point
  (:func:`_place_labels`), and points closer than a few pixels share one label;
- only panels with something to show are laid out.
"""

from __future__ import annotations

import logging
import math
import textwrap
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.backend_bases import RendererBase
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.legend import Legend
from matplotlib.lines import Line2D
from matplotlib.text import Annotation
from matplotlib.textpath import TextPath
from matplotlib.ticker import (
    EngFormatter,
    FuncFormatter,
    LogLocator,
    MaxNLocator,
    NullFormatter,
)
from matplotlib.transforms import Bbox

from seq2final.methods import paper_columns

log = logging.getLogger(__name__)

LEGEND_FONTSIZE = 8.0
LABEL_FONTSIZE = 7.0


def _figure(width: float, height: float, layout: str | None = "constrained") -> Figure:
    """A figure pyplot does not know: nothing has to close it (pyplot keeps every figure it made
    until ``close``, and warns past 20), it is freed with its last reference, and its Agg canvas
    draws, measures text and saves to any format (PNG, PDF) as a pyplot figure would. Constrained
    layout keeps titles, tick labels and outside legends inside the saved image (``layout=None``
    for a figure that sets its own margins)."""
    figure = Figure(figsize=(width, height), layout=layout)
    FigureCanvasAgg(figure)
    return figure


# ----------------------------------------------------------------------------------------------
# One look per method


# tab10, its grey (the Pareto front's and the reference lines' colour here) swapped for black.
_COLOURS = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
    "#8c564b", "#e377c2", "#000000", "#bcbd22", "#17becf",
)  # fmt: skip
# Seven markers: 7 and 10 are coprime, so method i's (colour i % 10, marker i % 7) repeats only
# after 70 methods, and methods that share a colour (10 apart) never share a marker.
_MARKERS = ("o", "s", "^", "D", "v", "P", "X")
_LINESTYLES = ("-", "--", "-.", ":")
STYLES = len(_COLOURS) * len(_MARKERS) * len(_LINESTYLES)  # distinct looks: 280


@dataclass(frozen=True)
class MethodStyle:
    """How one method is drawn in every figure: a colour, a marker and, past 70 methods, a line
    style, so no two methods look alike even where their colours are hard to tell apart."""

    colour: str
    marker: str
    linestyle: str

    def line(self) -> dict[str, str]:
        """Keyword arguments for ``Axes.plot``."""
        return {"color": self.colour, "marker": self.marker, "linestyle": self.linestyle}


def _style_of(index: int) -> MethodStyle:
    index %= STYLES
    return MethodStyle(
        _COLOURS[index % len(_COLOURS)],
        _MARKERS[index % len(_MARKERS)],
        _LINESTYLES[index // (len(_COLOURS) * len(_MARKERS))],
    )


@lru_cache(maxsize=8)
def _palette(columns: tuple[str, ...]) -> dict[str, MethodStyle]:
    """Built once per registry (a plugin registering methods makes a new one)."""
    return {method: _style_of(index) for index, method in enumerate(columns)}


def method_style(method: str) -> MethodStyle:
    """The look of ``method`` in every figure, from its place in the registry (the tables'
    column order), so the same method has the same colour and marker in the interpolation,
    projection, SVCCA, compute and protocol figures. A name the registry does not know (a
    plugin not loaded, a pair of modes such as ``erm+as_is``) gets a look after the registered
    ones, fixed by a hash of its name, and never a solid line: its colour may be a registered
    method's (there are ten), so its line style tells them apart in a figure that has both."""
    columns = paper_columns()
    palette = _palette(columns)
    if method in palette:
        return palette[method]
    first = max(len(columns), len(_COLOURS) * len(_MARKERS))  # past the solid-line looks
    spare = max(STYLES - first, 1)
    return _style_of(first + zlib.crc32(method.encode()) % spare)


def _method_handle(method: str) -> Line2D:
    style = method_style(method)
    return Line2D([], [], **style.line(), markersize=6)


def _by_registry(methods: Sequence[str]) -> list[str]:
    """The registry's order (the tables'), names it does not know after, as first seen."""
    columns = paper_columns()
    known = [m for m in columns if m in methods]
    return known + [m for m in dict.fromkeys(methods) if m not in columns]


# ----------------------------------------------------------------------------------------------
# Layout helpers


def _wrapped(text: str, width: int = 70) -> str:
    """Sequence names can be long (``source100:rotation60:...``): titles wrap instead of clipping."""
    return textwrap.fill(text, width)


def _grid(count: int) -> tuple[int, int]:
    """Rows and columns for ``count`` panels: as square as three columns allow (four panels are
    2 × 2, not 3 + 1 beside two empty slots)."""
    columns = count if count <= 3 else 2 if count == 4 else 3
    return -(-count // columns), columns


def _panels(
    count: int, width: float = 3.6, height: float = 3.0, extra: float = 0.0
) -> tuple[Figure, list[Axes]]:
    """``count`` axes and no more: a grid's unused slots stay blank, with no empty axes in them.
    ``extra`` inches of width are for a legend outside the panels."""
    rows, columns = _grid(count)
    figure = _figure(max(width * columns, 4.5) + extra, height * rows + 0.6)
    grid = figure.add_gridspec(rows, columns)
    axes = [figure.add_subplot(grid[index // columns, index % columns]) for index in range(count)]
    return figure, axes


def _legend_outside(
    figure: Figure, handles: Sequence[Line2D], labels: Sequence[str]
) -> Legend | None:
    """A figure legend right of the panels, in as many columns as it needs to fit the figure's
    height (a 26-method legend in one column would run off a short figure and be cut). The
    rows that fit are reckoned from the font size (a row is 1.5 em with the default spacing),
    not measured: measuring means a layout pass, which costs seconds on a many-panel figure."""
    if not handles:
        return None
    room = figure.get_figheight() * 72 * 0.9 - 2 * LEGEND_FONTSIZE  # points
    rows = max(int(room // (1.5 * LEGEND_FONTSIZE)), 1)
    return figure.legend(
        handles, labels, loc="outside right upper", fontsize=LEGEND_FONTSIZE,
        ncol=-(-len(handles) // rows), frameon=False, handlelength=2.2,
    )  # fmt: skip


def _method_legend(
    figure: Figure, methods: Sequence[str], extra: Sequence[tuple[Line2D, str]] = ()
) -> Legend | None:
    """The methods drawn, in the registry's order, with their look, then ``extra`` entries."""
    ordered = _by_registry(methods)
    handles = [_method_handle(m) for m in ordered] + [h for h, _ in extra]
    labels = ordered + [label for _, label in extra]
    return _legend_outside(figure, handles, labels)


# ----------------------------------------------------------------------------------------------
# Labels beside points, without overlap


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


def _clusters(axis: Axes, points: Sequence[tuple[float, float, str]]) -> list[_Cluster]:
    """Points (x, y, name) merged where their markers overlap on screen: fifteen methods on one
    spot get one label listing them, not fifteen labels stacked on each other."""
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
            clusters.append(_Cluster(x, y, [name], [method_style(name).colour]))
            anchors.append(where)
        elif name not in clusters[near].names:
            clusters[near].names.append(name)
            clusters[near].colours.append(method_style(name).colour)
    return clusters


def _overlaps(box: Bbox, boxes: Sequence[Bbox]) -> bool:
    return any(box.overlaps(other) for other in boxes)


def _place_labels(
    panels: Sequence[tuple[Axes, Sequence[tuple[float, float, str]]]],
    fontsize: float = LABEL_FONTSIZE,
    lines: Mapping[Axes, Sequence[tuple[float, float]]] | None = None,
) -> list[Annotation]:
    """Name each point (x, y, name) of each panel (or group of coincident points) beside it,
    where the name overlaps no other name, no marker, no leader line and stays inside the axes:
    candidate spots on rings of growing radius around the point, the first free one taken, a
    thin leader line from the farther rings. A name with no free spot is left out (the figure's
    legend still lists it) rather than drawn over another. Call it last, once for the figure:
    it lays the figure out once (legend and titles in place) and reads positions from that
    layout, and the labels it adds stay out of the layout so the axes do not move after.
    ``lines``: a polyline (data coordinates) per axis that names must not cross either (the
    Pareto front)."""
    if not panels:
        return []
    figure = panels[0][0].figure
    figure.draw_without_rendering()
    renderer = figure.canvas.get_renderer()
    lines = lines or {}
    return [
        label
        for axis, points in panels
        for label in _label_axis(axis, points, renderer, fontsize, lines.get(axis, ()))
    ]


def _label_axis(
    axis: Axes,
    points: Sequence[tuple[float, float, str]],
    renderer: RendererBase,
    fontsize: float,
    line: Sequence[tuple[float, float]],
) -> list[Annotation]:
    scale = axis.figure.dpi / 72
    frame = axis.get_window_extent(renderer).padded(-2)
    clusters = _clusters(axis, points)
    radius = _POINT_RADIUS * scale
    markers = [
        Bbox.from_extents(px - radius, py - radius, px + radius, py + radius)
        for px, py in (axis.transData.transform((x, y)) for x, y, _ in points)
        if np.isfinite(px) and np.isfinite(py)
    ]
    placed: list[Bbox] = []
    drawn = [tuple(axis.transData.transform(xy)) for xy in line]
    leaders: list[tuple[tuple[float, float], tuple[float, float]]] = list(
        zip(drawn, drawn[1:], strict=False)
    )  # the segments no name may cross: the line's, then the leader lines drawn
    labels = []
    order = sorted(range(len(clusters)), key=lambda i: (-len(clusters[i].names), i))
    for index in order:
        cluster = clusters[index]
        px, py = axis.transData.transform((cluster.x, cluster.y))
        probe = axis.annotate(cluster.text(), (cluster.x, cluster.y), fontsize=fontsize)
        extent = probe.get_window_extent(renderer)
        probe.remove()
        spot = _free_spot(
            (px, py), (extent.width, extent.height), frame, placed, markers, leaders, scale
        )
        if spot is None:
            log.debug("no room for the label %r", cluster.text())
            continue
        (dx, dy), ha, va, box, ring = spot
        leader = None
        if ring > _LEADER:
            leader = {"arrowstyle": "-", "color": cluster.colour(), "linewidth": 0.6,
                      "shrinkA": 1, "shrinkB": _POINT_RADIUS * 0.6}  # fmt: skip
            leaders.append(((px, py), (box.x0 + box.width / 2, box.y0 + box.height / 2)))
        label = axis.annotate(
            cluster.text(), (cluster.x, cluster.y), xytext=(dx / scale, dy / scale),
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
) -> tuple[tuple[float, float], str, str, Bbox, float] | None:
    """The first spot on the rings around ``point`` (pixels) where a label of ``size`` fits in
    ``frame``, meets no other label, marker or leader line, and its own leader line (drawn from
    the farther rings, from the point to the label's centre) crosses no other label: the offset
    (pixels), alignment, box and ring radius (points)."""
    px, py = point
    width, height = size
    for radius in _LABEL_RADII:
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
            return (dx, dy), ha, va, box, radius
    return None


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


# ----------------------------------------------------------------------------------------------
# Sequences and shifts


def _show(axis: Axes, image: np.ndarray | None) -> None:
    axis.set_xticks([])
    axis.set_yticks([])
    if image is not None:
        axis.imshow(image.transpose(1, 2, 0), interpolation="nearest")


def sequence_examples(
    steps: list[tuple[str, np.ndarray, np.ndarray]],
    class_names: list[str],
    title: str,
    subtitle: str,
    columns: int,
) -> Figure:
    """The first training image of up to ``columns`` classes, one row per step, under the
    (possibly flipped) label it carries: down a column the same class shows the shift, as in
    the paper's Figs. 5-6. ``steps`` holds each step's name, images (N, C, H, W) and labels.

    Drawn as one picture on one axes: a grid of axes costs about a second per step to lay out
    and save, and every run that builds a sequence draws this figure."""
    present = set().union(*(np.unique(labels).tolist() for _, _, labels in steps))
    shown = [c for c in range(len(class_names)) if c in present][:columns] or [0]
    height, width = steps[0][1].shape[2:]
    gap = max(2, height // 10)
    montage = np.ones(
        (len(steps) * (height + gap) - gap, len(shown) * (width + gap) - gap, 3), np.float32
    )
    for row, (_, images, labels) in enumerate(steps):
        for column, label in enumerate(shown):
            found = np.flatnonzero(labels == label)
            if not len(found):
                continue  # this step has no image of the class: the cell stays white
            image = images[found[0]].transpose(1, 2, 0).astype(np.float32)
            image = image / 255.0 if images.dtype == np.uint8 else image
            top, left = row * (height + gap), column * (width + gap)
            montage[top : top + height, left : left + width] = image  # (H, W, 1) broadcasts
    figure = _figure(0.5 + 0.55 * len(shown), 0.75 + 0.55 * len(steps))
    axis = figure.add_subplot()
    axis.imshow(montage, interpolation="nearest")
    axis.set_xticks([c * (width + gap) + width / 2 for c in range(len(shown))])
    axis.set_xticklabels([class_names[c] for c in shown], fontsize=LABEL_FONTSIZE)
    axis.xaxis.tick_top()
    axis.set_xlabel("label", fontsize=LABEL_FONTSIZE)
    axis.xaxis.set_label_position("top")
    axis.set_yticks([r * (height + gap) + height / 2 for r in range(len(steps))])
    axis.set_yticklabels(
        [f"step {i}: {name}" for i, (name, _, _) in enumerate(steps)], fontsize=LABEL_FONTSIZE
    )
    axis.tick_params(length=0)
    for spine in axis.spines.values():
        spine.set_visible(False)
    figure.suptitle(title, fontsize=9)
    axis.set_title(subtitle, fontsize=6, color="0.4", pad=18)
    return figure


def subpopulation_grid(
    steps: list[tuple[str, np.ndarray, np.ndarray, np.ndarray]],
    class_names: list[str],
    subclass_names: list[list[str]],
    super_classes: list[int],
) -> Figure:
    """Which sub-classes each step draws, for a few super-classes (paper Figs. 3-4).

    Rows are (super-class, step); the five columns are the sub-classes in shift order, showing an
    example image where the step has that sub-class and an empty cell where it has none.
    """
    n_sub = len(subclass_names[0])
    rows = [(c, step) for c in super_classes for step in steps]
    figure = _figure(1.2 * n_sub + 1.5, 1.1 * len(rows))
    axes = figure.subplots(len(rows), n_sub, squeeze=False)
    for row, (label, (step_name, images, labels, subs)) in enumerate(rows):
        for sub in range(n_sub):
            members = np.flatnonzero((labels == label) & (subs == sub))
            _show(axes[row, sub], images[members[0]] if len(members) else None)
            if row % len(steps) == 0:
                axes[row, sub].set_title(subclass_names[label][sub], fontsize=7)
        axes[row, 0].set_ylabel(
            f"{class_names[label]}\n{step_name}", fontsize=6, rotation=0, ha="right", va="center"
        )
    return figure


def shift_profile(table: pd.DataFrame, title: str) -> Figure:
    """Normalised distance to the final step, per earlier step: covariate and conditional W2 and
    the 1-NN distance."""
    figure = _figure(4.5, 3)
    axis = figure.add_subplot()
    for metric, row in table.iterrows():
        axis.plot(range(len(row)), row.to_numpy(dtype=float), marker="o", label=str(metric))
    axis.axhline(1.0, color="grey", linestyle=":", linewidth=1)
    axis.set_xticks(range(len(table.columns)), [str(c) for c in table.columns], fontsize=7)
    axis.set_ylabel("distance to final ÷ final train-vs-test")
    axis.set_title(title, fontsize=9)
    axis.legend(fontsize=7)
    return figure


# ----------------------------------------------------------------------------------------------
# Learning curves


def learning_curves(curves: pd.DataFrame, title: str) -> Figure:
    """Loss and accuracy per epoch, train and valid, one line style per fit stage.

    Epoch 0 is the model before any update (validation only), so a fine-tuned model's curve starts
    where its historical state stood on the final step.
    """
    figure = _figure(9, 3.4)
    loss_axis, accuracy_axis = figure.subplots(1, 2)
    stages = list(dict.fromkeys(curves["stage"]))
    for index, stage in enumerate(stages):
        rows = curves[curves["stage"] == stage]
        suffix = f" ({stage})" if len(stages) > 1 else ""
        for axis, metric in ((loss_axis, "loss"), (accuracy_axis, "accuracy")):
            for split, style in (("train", "--"), ("valid", "-")):
                axis.plot(
                    rows["epoch"],
                    rows[f"{split}_{metric}"],
                    style,
                    color=f"C{index % 10}",
                    label=f"{split}{suffix}",
                )
    for axis in (loss_axis, accuracy_axis):
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    loss_axis.set(xlabel="epoch", ylabel="cross-entropy", title="loss")
    accuracy_axis.set(xlabel="epoch", ylabel="accuracy", title="accuracy", ylim=(0, 1))
    if stages:  # a job that stored no epoch has nothing to name
        accuracy_axis.legend(fontsize="small", ncol=1 + len(stages) // 4)
    figure.suptitle(title)
    return figure


def learning_curve_overview(jobs: Sequence[tuple[str, pd.DataFrame]], title: str) -> Figure:
    """Every job's accuracy per epoch on one page, a small panel per job (train dashed, valid
    solid, a colour per fit stage), so a run of 26 methods can be checked at a glance instead of
    opening 26 files; the per-job figures keep the loss and the detail. ``jobs``: (panel title,
    curves) in the order to show; a job without curves gets no panel.

    The margins are fixed in inches rather than left to constrained layout, whose cost grows
    with the panels (seconds per save for 26, and a protocol's views make hundreds)."""
    jobs = [(name, curves) for name, curves in jobs if len(curves)]
    stages = list(dict.fromkeys(s for _, curves in jobs for s in curves["stage"]))
    colour = {stage: f"C{index % 10}" for index, stage in enumerate(stages)}
    handles = [Line2D([], [], color="black", linestyle=s) for s in ("--", "-")]
    labels = ["train", "valid"]
    if len(stages) > 1:
        handles += [Line2D([], [], color=colour[s]) for s in stages]
        labels += [f"stage {s}" for s in stages]
    columns = min(len(jobs), 6) or 1
    rows = -(-len(jobs) // columns) or 1
    # the legend's column: its longest entry (stage names run long: exponential_2e-4_0.5/final)
    # after a handle and the padding (3.6 em), measured as glyph outlines, not estimated
    font = FontProperties(size=LEGEND_FONTSIZE)
    text = max(TextPath((0, 0), label, prop=font).get_extents().width for label in labels)
    left, top, bottom = 0.6, 0.6, 0.5  # tick labels, title, axis label
    right = (text + 3.6 * LEGEND_FONTSIZE) / 72 + 0.15
    width, height = 2.15 * columns + left + right, 1.6 * rows + top + bottom
    figure = _figure(width, height, layout=None)
    grid = figure.add_gridspec(
        rows, columns, left=left / width, right=1 - right / width, top=1 - top / height,
        bottom=bottom / height, wspace=0.1, hspace=0.42,
    )  # fmt: skip
    first = None
    for index, (name, curves) in enumerate(jobs):
        axis = figure.add_subplot(grid[index // columns, index % columns], sharey=first)
        first = first or axis
        for stage in dict.fromkeys(curves["stage"]):
            part = curves[curves["stage"] == stage]
            for split, style in (("train", "--"), ("valid", "-")):
                axis.plot(part["epoch"], part[f"{split}_accuracy"], style, color=colour[stage],
                          linewidth=1)  # fmt: skip
        axis.set_title(name, fontsize=8, pad=2)
        axis.set_ylim(0, 1)
        axis.xaxis.set_major_locator(MaxNLocator(integer=True, nbins=4))
        axis.tick_params(labelsize=6, pad=1)
        if index % columns:
            axis.tick_params(labelleft=False)
    figure.legend(handles, labels, loc="upper left", fontsize=LEGEND_FONTSIZE, frameon=False,
                  bbox_to_anchor=(1 - (right - 0.05) / width, 1 - top / height))  # fmt: skip
    figure.suptitle(_wrapped(f"{title}: accuracy per epoch", int(width * 12)), fontsize=10,
                    y=1 - 0.12 / height, va="top")  # fmt: skip
    figure.supxlabel("epoch", fontsize=8, y=0.08 / height, va="bottom")
    figure.supylabel("accuracy", fontsize=8, x=0.08 / width, ha="left")
    return figure


# ----------------------------------------------------------------------------------------------
# The paper's figures of finished jobs


def interpolation_panels(paths: dict[str, dict[str, pd.DataFrame]], title: str) -> Figure:
    """Paper Fig. 1: test accuracy along each method's path, one panel per architecture, the
    methods named once in a legend beside the panels (they look the same in every panel)."""
    figure, axes = _panels(len(paths), width=4.4, height=3.6, extra=1.6)
    for axis, (arch, methods) in zip(axes, paths.items(), strict=True):
        for method in _by_registry(list(methods)):
            path = methods[method]
            axis.plot(path["s"], path["test_accuracy"], **method_style(method).line(),
                      markevery=0.12, markersize=4.5, linewidth=1.3, label=method, gid=method)  # fmt: skip
        axis.set(title=arch, xlabel="s (start → final model)", ylabel="test accuracy", xlim=(0, 1))
    figure.suptitle(_wrapped(title), fontsize=9)
    _method_legend(figure, [m for methods in paths.values() for m in methods])
    return figure


def shown_layers(layers: list[str]) -> list[str]:
    """The paper's panels: the input conv, the second block, the head, and the whole model."""
    wanted = ["conv1", "layer2" if "layer2" in layers else "layer1", "fc", "model"]
    return [layer for layer in dict.fromkeys(wanted) if layer in layers]


def _drawn_layers(frame: pd.DataFrame, x: str, y: str) -> list[str]:
    """The shown layers that have a finite point to draw: a layer with none gets no panel."""
    if frame.empty:
        return []
    finite = frame[np.isfinite(frame[x].astype(float)) & np.isfinite(frame[y].astype(float))]
    layers = shown_layers(list(dict.fromkeys(frame["layer"])))
    return [layer for layer in layers if (finite["layer"] == layer).any()]


def _layer_panels(
    frame: pd.DataFrame, x: str, y: str, oracle: tuple[float, float], labels: tuple[str, str],
    title: str,
) -> Figure | None:  # fmt: skip
    """One panel per shown layer with something to draw: each job's trajectory in (x, y), its
    end marked with the method's look and named beside it, the oracle marked. None when no
    layer has a point."""
    layers = _drawn_layers(frame, x, y)
    if not layers:
        return None
    figure, axes = _panels(len(layers), width=3.9, height=3.4, extra=1.4)
    ends: dict[Axes, list[tuple[float, float, str]]] = {}
    for axis, layer in zip(axes, layers, strict=True):
        mine = frame[frame["layer"] == layer]
        ends[axis] = [(*oracle, "oracle")]
        for label in _by_registry([str(n) for n in dict.fromkeys(mine["label"])]):
            rows = mine[mine["label"] == label].sort_values("point")
            style = method_style(label)
            axis.plot(rows[x], rows[y], color=style.colour, linestyle=style.linestyle,
                      alpha=0.5, linewidth=1, marker=".", markersize=3)  # fmt: skip
            end = (float(rows[x].iloc[-1]), float(rows[y].iloc[-1]))
            axis.plot(*end, marker=style.marker, color=style.colour, markersize=6, linestyle="",
                      gid=label)  # fmt: skip
            ends[axis].append((*end, label))
        oracle_style = method_style("oracle")
        axis.plot(*oracle, marker=oracle_style.marker, color=oracle_style.colour, markersize=9,
                  markeredgecolor="black", linestyle="", gid="oracle")  # fmt: skip
        axis.set(title=layer, xlabel=labels[0], ylabel=labels[1])
        axis.margins(0.1)
    figure.suptitle(_wrapped(title), fontsize=9)
    _method_legend(figure, ["oracle", *(str(n) for n in dict.fromkeys(frame["label"]))])
    _place_labels(list(ends.items()))
    return figure


def projection_panels(frame: pd.DataFrame, title: str) -> Figure | None:
    """Paper Fig. 16: each model's weights in the oracle-centred plane, per layer and overall;
    None when there is nothing to draw."""
    labels = ("toward ERM on history", "toward final-step-only")
    return _layer_panels(frame, "x", "y", (0, 0), labels, title)


def svcca_panels(frame: pd.DataFrame, title: str) -> Figure | None:
    """Paper Fig. 17: SVCCA with the oracle keeping 50 % (x) and 90 % (y) of the variance; None
    when there is nothing to draw."""
    labels = ("SVCCA, 50 % variance", "SVCCA, 90 % variance")
    return _layer_panels(frame, "svcca_50", "svcca_90", (1, 1), labels, title)


_REFERENCES = {"baseline": "ERM on the final step (baseline)", "erm": "ERM on all steps"}


def adjacency_sweep(trials: pd.DataFrame, references: Mapping[str, float], title: str) -> Figure:
    """Paper Fig. 9: the joint model's final-step validation accuracy against λ_adj, with the
    validation accuracy of the reference methods in ``references`` (method → value) as
    lines in their own colours."""
    figure = _figure(7.0, 3.6)
    axis = figure.add_subplot()
    jm = method_style("jm")
    for index, (state, rows) in enumerate(trials.groupby("state")):
        axis.plot(rows["adjacency"], rows["valid_accuracy"], _MARKERS[index % len(_MARKERS)],
                  color=jm.colour, alpha=0.8, label=f"JM trial ({state})")  # fmt: skip
    for method, value in references.items():
        axis.axhline(value, color=method_style(method).colour, linestyle="--", linewidth=1,
                     label=_REFERENCES.get(method, method))  # fmt: skip
    axis.set_xscale("log")
    # 1, 2 and 5 per decade, as plain numbers: matplotlib's default labels every minor tick of a
    # log axis spanning under a decade, in overlapping "2 × 10⁰ 3 × 10⁰" form
    axis.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axis.xaxis.set_minor_formatter(NullFormatter())
    axis.set(xlabel="λ_adj (adjacent-step L2)", ylabel="final-step validation accuracy")
    axis.set_title(_wrapped(title, 55), fontsize=8)
    handles, labels = axis.get_legend_handles_labels()
    _legend_outside(figure, handles, labels)
    return figure


def result_heatmap(means: pd.DataFrame, title: str) -> Figure:
    """Test accuracy, methods (rows, the paper's order) × architectures; empty where missing."""
    table = means.T
    figure = _figure(max(3.5 + 0.9 * len(table.columns), 5.0), 1.2 + 0.32 * len(table.index))
    axis = figure.add_subplot()
    image = axis.imshow(table.to_numpy(dtype=float), cmap="viridis", aspect="auto")
    for (row, column), value in np.ndenumerate(table.to_numpy(dtype=float)):
        if not np.isnan(value):
            axis.text(column, row, f"{value:.2f}", ha="center", va="center", fontsize=7,
                      color="white" if value < np.nanmean(table.to_numpy(dtype=float)) else "black")  # fmt: skip
    axis.set_xticks(range(len(table.columns)), list(table.columns), rotation=30, fontsize=7)
    axis.set_yticks(range(len(table.index)), list(table.index), fontsize=7)
    figure.colorbar(image, ax=axis, label="test accuracy")
    axis.set_title(_wrapped(title, 55), fontsize=8)
    return figure


def protocol_figure(rows: list[dict], protocol: str, title: str) -> Figure:
    """One line per method over time, means over seeds: for ``eval_stream`` each time's window
    average with the band down to its worst step shaded; for ``test_then_train`` the accuracy on
    each step before training on it; for ``eval_fix`` and ``mixed_split`` the accuracy on each
    later step."""
    figure = _figure(8.0, 4.2)
    axis = figure.add_subplot()
    methods = _by_registry([r["method"] for r in rows])
    for method in methods:
        mine = [r for r in rows if r["method"] == method]
        style = method_style(method)
        if protocol == "eval_stream":
            frame = pd.DataFrame([t for r in mine for t in r["per_time"]])
            means = frame.groupby("time")[["average", "worst"]].mean()
            x, y = means.index, means["average"]
            axis.fill_between(x, means["worst"], y, color=style.colour, alpha=0.12)
        else:
            column = "curve" if protocol == "test_then_train" else "ood_per_step"
            frame = pd.DataFrame([{"step": int(s), "accuracy": a} for r in mine
                                  for s, a in r[column].items()])  # fmt: skip
            means = frame.groupby("step")["accuracy"].mean()
            x, y = means.index, means
        axis.plot(x, y, **style.line(), markersize=4, linewidth=1.2, label=method, gid=method)
    axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    xlabel = {"eval_stream": "time t (model of steps 0..t)",
              "test_then_train": "step t (predicted by the model of steps 0..t-1)"}  # fmt: skip
    axis.set(xlabel=xlabel.get(protocol, "later step"), ylabel="accuracy")
    low, high = axis.get_ylim()  # the data's range: methods a few points apart stay apart
    axis.set_ylim(max(0.0, low - 0.02), min(1.0, high + 0.02))
    if protocol == "eval_stream":
        axis.set_title("window average (line) down to the window's worst step (band)", fontsize=8)
    figure.suptitle(_wrapped(title), fontsize=10)
    _method_legend(figure, methods)
    return figure


def forgetting_figure(rows: list[dict], title: str) -> Figure:
    """Feature Forgetting's two curves over an Eval-Stream, one line per method, means over
    seeds: P_CL, the model of time t's mean accuracy on the steps 0..t it has seen, and
    P_forget, how far it has fallen on the earlier steps below the best an earlier time scored
    (docs/representations.md)."""
    figure = _figure(9.0, 4.0)
    axes = figure.subplots(1, 2)
    methods = _by_registry([r["method"] for r in rows])
    for method in methods:
        frame = pd.DataFrame([t for r in rows if r["method"] == method for t in r["per_time"]])
        means = frame.groupby("time")[["p_cl", "p_forget"]].mean()
        for axis, column in zip(axes, ("p_cl", "p_forget"), strict=True):
            curve = means[column].dropna()
            axis.plot(curve.index, curve, **method_style(method).line(), markersize=4,
                      linewidth=1.2, label=method, gid=method)  # fmt: skip
    labels = ("P_CL: accuracy on steps 0..t", "P_forget: best earlier − now, steps before t")
    for axis, label, ylabel in zip(axes, labels, ("test accuracy", "accuracy lost"), strict=True):
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        axis.set(xlabel="time t (model of steps 0..t)", ylabel=ylabel)
        axis.set_title(label, fontsize=8)
    axes[1].axhline(0.0, color="grey", linewidth=0.8)
    figure.suptitle(_wrapped(title), fontsize=10)
    _method_legend(figure, methods)
    return figure


def _label_flops(axis: Axes, flops: pd.Series) -> None:
    """Ticks of a log FLOPs axis in engineering units (``50 TFLOP``): at 1, 2 and 5 times each
    power of ten when the points span under two decades (a decade alone can leave the axis
    without a labelled tick), at the powers of ten otherwise; minor ticks unlabelled."""
    span = np.log10(flops.max() / flops.min()) if len(flops) and flops.min() > 0 else 0.0
    axis.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0) if span < 2 else (1.0,)))
    axis.xaxis.set_major_formatter(EngFormatter(unit="FLOP"))
    axis.xaxis.set_minor_formatter(NullFormatter())


def compute_pareto(
    points: pd.DataFrame,
    title: str,
    accuracy: str = "test accuracy",
    compute: str = "training FLOPs (historical state included, every trial)",
) -> Figure:
    """Test accuracy against total training FLOPs (log scale), one point per method in its own
    look, named beside it where the name has room (points on one spot share a name), with the
    Pareto front (no other method both cheaper and more accurate) joined by a line and ringed
    (a front of one point shows too), as NED plots accuracy against compute. ``points``: method,
    train_flops, test_accuracy; ``accuracy`` and ``compute`` label the axes (a protocol's score,
    the FLOPs of all its views)."""
    figure = _figure(8.2, 4.8)
    axis = figure.add_subplot()
    for row in points.itertuples():
        style = method_style(row.method)
        axis.plot(row.train_flops, row.test_accuracy, marker=style.marker, color=style.colour,
                  markersize=6, linestyle="", gid=row.method)  # fmt: skip
    ordered = points.sort_values(["train_flops", "test_accuracy"], ascending=[True, False])
    front, best = [], -np.inf
    for row in ordered.itertuples():
        if row.test_accuracy > best:
            front.append((row.train_flops, row.test_accuracy))
            best = row.test_accuracy
    extra = []
    if front:
        (line,) = axis.plot(*zip(*front, strict=True), "--o", color="grey", linewidth=1,
                            markersize=11, markerfacecolor="none", label="Pareto front")  # fmt: skip
        extra.append((line, "Pareto front"))
    axis.set(xscale="log", xlabel=compute, ylabel=accuracy)
    axis.margins(x=0.08, y=0.1)
    _label_flops(axis, points["train_flops"])
    figure.suptitle(_wrapped(title), fontsize=10)
    _method_legend(figure, [str(m) for m in points["method"]], extra)
    named = [(r.train_flops, r.test_accuracy, str(r.method)) for r in points.itertuples()]
    _place_labels([(axis, named)], lines={axis: front})
    return figure


# ----------------------------------------------------------------------------------------------
# Robustness across a family (docs/intensity.md)

MEASURE_LABELS = {
    "intensity": "intensity (the dial)",
    "w2_covariate": "covariate W2, source → final",
    "nn1": "1-NN distance, source → final",
    "support_intensity": "support intensity I of the final step",
}


def robustness_lines(deltas: pd.DataFrame, slopes: pd.DataFrame, arch: str, title: str) -> Figure:
    """Control+Shift's Figs. 4–6: each method's Δ-accuracy (points: one per member, the mean
    over its seeds) against each shift measure, with its least-squares line; one panel per
    measure."""
    measures = [m for m in MEASURE_LABELS if m in set(slopes["measure"])]
    figure = _figure(3.6 * len(measures) + 1.6, 3.2)
    cell = deltas[deltas["arch"] == arch]
    methods = sorted(set(cell["method"]))
    for index, measure in enumerate(measures, start=1):
        axis = figure.add_subplot(1, len(measures), index)
        for method in methods:
            style = method_style(method)
            own = cell[cell["method"] == method].dropna(subset=[measure])
            axis.scatter(own[measure], own["delta"], s=14, color=style.colour,
                         marker=style.marker, alpha=0.7)  # fmt: skip
            line = slopes[(slopes["method"] == method) & (slopes["arch"] == arch)
                          & (slopes["measure"] == measure)]  # fmt: skip
            if len(own) and len(line) and np.isfinite(line["slope"].iloc[0]):
                xs = np.linspace(own[measure].min(), own[measure].max(), 2)
                fit = line.iloc[0]
                axis.plot(xs, fit["intercept"] + fit["slope"] * xs, color=style.colour,
                          linestyle=style.linestyle, linewidth=1.2)  # fmt: skip
        axis.axhline(0.0, color="grey", linestyle=":", linewidth=1)
        axis.set_xlabel(MEASURE_LABELS[measure], fontsize=8)
        axis.set_ylabel("Δ-accuracy (shifted − clean)" if index == 1 else "", fontsize=8)
        axis.tick_params(labelsize=7)
    figure.suptitle(_wrapped(f"{title} · {arch}", 30 + 40 * len(measures)), fontsize=9)
    _method_legend(figure, methods)
    return figure


def slope_against_clean(slopes: pd.DataFrame, measure: str, title: str) -> Figure:
    """Each method and architecture's robustness slope (with its 95 % interval) against its
    clean accuracy: Control+Shift asks whether better models also degrade more slowly. Points
    take their method's look; with several architectures each point names its own."""
    figure = _figure(5.2, 3.4)
    axis = figure.add_subplot()
    rows = slopes[slopes["measure"] == measure]
    named = rows["arch"].nunique() > 1
    for _, row in rows.iterrows():
        style = method_style(row["method"])
        error = None
        if np.isfinite(row["low"]):
            error = [[row["slope"] - row["low"]], [row["high"] - row["slope"]]]
        axis.errorbar(row["clean_accuracy"], row["slope"], yerr=error, color=style.colour,
                      marker=style.marker, markersize=5, capsize=2, linewidth=0.8)  # fmt: skip
        if named:
            axis.annotate(row["arch"], (row["clean_accuracy"], row["slope"]), fontsize=6,
                          xytext=(4, 3), textcoords="offset points", color=style.colour)  # fmt: skip
    axis.axhline(0.0, color="grey", linestyle=":", linewidth=1)
    axis.set_xlabel("clean accuracy (the family's reference member)", fontsize=8)
    axis.set_ylabel(
        f"robustness slope: Δ-accuracy per unit of\n{MEASURE_LABELS[measure]}", fontsize=8
    )
    axis.tick_params(labelsize=7)
    axis.set_title(_wrapped(title, 55), fontsize=9)
    _method_legend(figure, sorted(set(rows["method"])))
    return figure


def history_value_lines(value: pd.DataFrame, reference: str, title: str) -> Figure:
    """Each method's gain over ``reference`` on the final step against the family's intensity,
    one panel per architecture: what the history is worth as the shift grows."""
    archs = sorted(set(value["arch"]))
    figure = _figure(3.6 * len(archs) + 1.6, 3.2)
    for index, arch in enumerate(archs, start=1):
        axis = figure.add_subplot(1, len(archs), index)
        cell = value[value["arch"] == arch]
        for method in sorted(set(cell["method"])):
            own = cell[cell["method"] == method].sort_values("intensity")
            axis.plot(own["intensity"], own["gain"], markersize=4, linewidth=1.2,
                      **method_style(method).line())  # fmt: skip
        axis.axhline(0.0, color="grey", linestyle=":", linewidth=1)
        axis.set_xlabel("intensity", fontsize=8)
        axis.set_ylabel(f"final-step accuracy − {reference}" if index == 1 else "", fontsize=8)
        axis.set_title(arch, fontsize=8)
        axis.tick_params(labelsize=7)
    figure.suptitle(_wrapped(title, 10 + 35 * len(archs)), fontsize=9)
    _method_legend(figure, sorted(set(value["method"])))
    return figure


KIND_NAMES = {"ft": "FT: every layer fine-tuned", "lp": "LP: the head alone"}
"""The panel titles of the curve kinds."""


def representation_curves(table: pd.DataFrame, title: str, reference: str | None = None) -> Figure:
    """Feature Forgetting's learning curves: test accuracy on the final step against the size of
    the training subset it was fine-tuned (FT) or probed (LP) on, log scale, one line per
    historical state (means over seeds, bars one standard deviation where there are several),
    a panel per kind; the ``reference`` state (a fresh model's) in black, dashed. ``table``:
    :func:`seq2final.reporting.curves.curve_table`'s rows of one architecture and view."""
    kinds = list(dict.fromkeys(table["kind"]))
    figure = _figure(4.2 * len(kinds) + 1.8, 3.8)
    axes = np.atleast_1d(figure.subplots(1, len(kinds), sharey=True))
    states = list(dict.fromkeys(table["state"]))
    drawn = [state for state in states if state != reference]
    styles = {state: _style_of(index) for index, state in enumerate(drawn)}
    styles[reference or ""] = MethodStyle("#000000", "x", "--")
    states = [*drawn, *[s for s in states if s == reference]]
    for axis, kind in zip(axes, kinds, strict=True):
        for state in states:
            curve = table[(table["kind"] == kind) & (table["state"] == state)]
            if curve.empty:
                continue
            axis.errorbar(curve["size"], curve["test_accuracy"], yerr=curve["std"].fillna(0.0),
                          **styles[state].line(), markersize=4, linewidth=1.2, capsize=2,
                          label=state, gid=state)  # fmt: skip
        axis.set_xscale("log", base=2)
        sizes = sorted(set(table["size"]))
        axis.set_xticks(sizes, [str(s) for s in sizes])
        axis.xaxis.set_minor_formatter(NullFormatter())
        axis.set(xlabel="final-step training images", title=KIND_NAMES.get(kind, kind))
        axis.title.set_fontsize(8)
    axes[0].set_ylabel("final-step test accuracy")
    figure.suptitle(_wrapped(title), fontsize=10)
    handles = [Line2D([], [], **styles[s].line(), markersize=6) for s in states]
    _legend_outside(figure, handles, states)
    return figure


def p_rep_by_history(table: pd.DataFrame, title: str, reference: str | None = None) -> Figure:
    """P_rep against the number of steps each state trained on (Feature Forgetting's Fig. 2:
    does the representation keep improving as history grows?), one line per historical mode, a
    panel per kind, bars one standard deviation over seeds; the ``reference`` (a fresh model's,
    no history) as a dashed black level. ``table``: :func:`seq2final.reporting.curves.p_rep_table`'s
    rows of one architecture and tested view."""
    kinds = list(dict.fromkeys(table["kind"]))
    figure = _figure(3.8 * len(kinds) + 1.8, 3.6)
    axes = np.atleast_1d(figure.subplots(1, len(kinds), sharey=True))
    drawn = [s for s in dict.fromkeys(table["state"]) if s != reference]
    styles = {state: _style_of(index) for index, state in enumerate(drawn)}
    steps = sorted(set(table.loc[table["state"] != reference, "history"]))
    for axis, kind in zip(axes, kinds, strict=True):
        for state in drawn:
            own = table[(table["kind"] == kind) & (table["state"] == state)].sort_values("history")
            if not own.empty:
                axis.errorbar(own["history"], own["p_rep"], yerr=own["std"].fillna(0.0),
                              **styles[state].line(), markersize=4, linewidth=1.2, capsize=2,
                              label=state, gid=state)  # fmt: skip
        level = table[(table["kind"] == "ft") & (table["state"] == reference)]
        if not level.empty:  # the fresh model is fine-tuned only: its level on every panel
            axis.axhline(level["p_rep"].iloc[0], color="#000000", linestyle="--", linewidth=1,
                         gid=reference)  # fmt: skip
        axis.set_xticks(steps, [str(s) for s in steps])
        axis.set(xlabel="steps the state trained on", title=KIND_NAMES.get(kind, kind))
        axis.title.set_fontsize(8)
    axes[0].set_ylabel("P_rep on the final step")
    figure.suptitle(_wrapped(title), fontsize=10)
    labels = [*drawn, *([f"{reference} (FT)"] if reference in set(table["state"]) else [])]
    handles = [Line2D([], [], **styles[s].line(), markersize=6) for s in drawn]
    handles += [Line2D([], [], color="#000000", linestyle="--")] * (len(labels) - len(drawn))
    _legend_outside(figure, handles, labels)
    return figure
