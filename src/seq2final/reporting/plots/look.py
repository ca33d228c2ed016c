"""How every figure looks: fonts, a figure without pyplot, one look per method, panels and
legends (the rules are in the package docstring)."""

from __future__ import annotations

import re
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.layout_engine import ConstrainedLayoutEngine
from matplotlib.legend import Legend
from matplotlib.lines import Line2D

from seq2final.methods import paper_columns

LEGEND_FONTSIZE = 8.0
LABEL_FONTSIZE = 7.0


class _LaidOutOnce(ConstrainedLayoutEngine):
    """Constrained layout run at a figure's first draw and kept for the draws after it.

    A finished figure is drawn up to three times: saved as PNG, saved as PDF, logged to MLflow.
    The layout measures every title and tick label, and cost about as much as a draw each time
    (about 15 % of ``visualize`` on the tests' tiny run). A figure is finished when it is first
    drawn: :func:`labels._place_labels`, the one function that draws earlier, is called last and
    adds only names kept out of the layout. The layout is in figure fractions, so a PDF at
    another resolution gets the same one."""

    def __init__(self) -> None:
        super().__init__()
        self._done = False

    def execute(self, fig: Figure) -> None:
        if not self._done:
            super().execute(fig)
            self._done = True  # after it: a layout that raised is tried again at the next draw


def new_figure(
    width: float, height: float, layout: Literal["constrained"] | None = "constrained"
) -> Figure:
    """A figure pyplot does not know: nothing has to close it (pyplot keeps every figure it made
    until ``close``, and warns past 20), it is freed with its last reference, and its Agg canvas
    draws, measures text and saves to any format (PNG, PDF) as a pyplot figure would. Constrained
    layout keeps titles, tick labels and outside legends inside the saved image, computed once
    (:class:`_LaidOutOnce`; ``layout=None`` for a figure that sets its own margins)."""
    figure = Figure(
        figsize=(width, height), layout=_LaidOutOnce() if layout == "constrained" else None
    )
    FigureCanvasAgg(figure)
    return figure


# One look per method


# tab10, its grey (the Pareto front's and the reference lines' colour here) swapped for black,
# then five darker or warmer shades none of those ten is close to (indigo, moss, plum, gold,
# teal): with ten colours a registry of 30 drew each colour three times, and a reader saw erm,
# ewc and lisa as one orange; with fifteen a colour is shared by two methods at most, 15 apart
# in the tables' order and never with the same marker.
_COLOURS = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
    "#8c564b", "#e377c2", "#000000", "#bcbd22", "#17becf",
    "#393b79", "#637939", "#7b4173", "#e7ba52", "#0b6e69",
)  # fmt: skip
# Seven markers: 7 and 15 are coprime, so method i's (colour i % 15, marker i % 7) repeats only
# after 105 methods, and methods that share a colour (15 apart) never share a marker.
_MARKERS = ("o", "s", "^", "D", "v", "P", "X")
_LINESTYLES = ("-", "--", "-.", ":")
STYLES = len(_COLOURS) * len(_MARKERS) * len(_LINESTYLES)  # distinct looks: 420


@dataclass(frozen=True)
class MethodStyle:
    """How one method is drawn in every figure: a colour, a marker and, past 105 methods, a line
    style, so no two methods look alike even where their colours are hard to tell apart."""

    colour: str
    marker: str
    linestyle: str

    def line(self) -> dict[str, Any]:
        """Keyword arguments for ``Axes.plot``."""
        return {"color": self.colour, "marker": self.marker, "linestyle": self.linestyle}


def style_of(index: int) -> MethodStyle:
    index %= STYLES
    return MethodStyle(
        _COLOURS[index % len(_COLOURS)],
        _MARKERS[index % len(_MARKERS)],
        _LINESTYLES[index // (len(_COLOURS) * len(_MARKERS))],
    )


@lru_cache(maxsize=8)
def _palette(columns: tuple[str, ...]) -> dict[str, MethodStyle]:
    """Built once per registry (a plugin registering methods makes a new one)."""
    return {method: style_of(index) for index, method in enumerate(columns)}


def method_style(method: str, among: Sequence[str] = ()) -> MethodStyle:
    """The look of ``method`` in every figure, from its place in the registry (the tables'
    column order), so the same method has the same colour and marker in the interpolation,
    projection, SVCCA, compute and protocol figures. A name the registry does not know (a
    plugin not loaded, a pair of modes such as ``erm+as_is``) gets a look after the registered
    ones, fixed by a hash of its name, and never a solid line; where the figure's other
    methods (``among``) already use its colour, it takes the first colour none of them uses,
    so ``erm+as_is`` is never ``baseline``'s blue beside it."""
    columns = paper_columns()
    palette = _palette(columns)
    if method in palette:
        return palette[method]
    own = _unregistered_style(method, len(columns))
    taken = {palette[m].colour for m in among if m in palette}
    for other in sorted(m for m in set(among) if m not in palette):
        look = _unregistered_style(other, len(columns))
        colour = look.colour if look.colour not in taken else _free_colour(taken)
        if other == method:
            return MethodStyle(colour, own.marker, own.linestyle)
        taken.add(colour)
    return own


def _unregistered_style(method: str, registered: int) -> MethodStyle:
    first = max(registered, len(_COLOURS) * len(_MARKERS))  # past the solid-line looks
    spare = max(STYLES - first, 1)
    return style_of(first + zlib.crc32(method.encode()) % spare)


def _free_colour(taken: set[str]) -> str:
    """The first colour of the palette not in ``taken`` (the first one where all are)."""
    return next((c for c in _COLOURS if c not in taken), _COLOURS[0])


def _method_handle(style: MethodStyle) -> Line2D:
    return Line2D([], [], **style.line(), markersize=6)


def _by_registry(methods: Sequence[str]) -> list[str]:
    """The registry's order (the tables'), names it does not know after, as first seen."""
    columns = paper_columns()
    known = [m for m in columns if m in methods]
    return known + [m for m in dict.fromkeys(methods) if m not in columns]


# Layout helpers


def wrapped(text: str, width: int = 70) -> str:
    """Sequence names can be long (``source100:rotation60:...``): titles wrap instead of clipping,
    between words and after a name's ``:`` between two steps, never inside a word or a step
    (``rotation@15/1000`` stays whole; a piece longer than a line has a line of its own)."""
    lines = []
    for paragraph in text.split("\n"):
        line = ""
        for word in paragraph.split(" "):
            for index, piece in enumerate(re.findall(r"[^:]*:|[^:]+", word) or [""]):
                glue = " " if index == 0 and line else ""
                if line and len(line) + len(glue) + len(piece) > width:
                    lines.append(line)
                    line, glue = "", ""
                line += glue + piece
        lines.append(line)
    return "\n".join(lines)


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
    figure = new_figure(max(width * columns, 4.5) + extra, height * rows + 0.6)
    grid = figure.add_gridspec(rows, columns)
    axes = [figure.add_subplot(grid[index // columns, index % columns]) for index in range(count)]
    return figure, axes


def legend_outside(
    figure: Figure, handles: Sequence[Artist], labels: Sequence[str]
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


def method_legend(
    figure: Figure,
    methods: Sequence[str],
    extra: Sequence[tuple[Line2D, str]] = (),
    among: Sequence[str] = (),
) -> Legend | None:
    """The methods drawn, in the registry's order, with their look (the look
    :func:`method_style` gives each ``among`` the figure's methods, where the figure drew them
    so), then ``extra`` entries."""
    ordered = _by_registry(methods)
    looks = [method_style(m, among) for m in ordered]
    handles = [_method_handle(look) for look in looks] + [h for h, _ in extra]
    labels = ordered + [label for _, label in extra]
    return legend_outside(figure, handles, labels)


def _caption(lines: Sequence[str], width: float) -> str:
    """A caption's lines, each wrapped to the figure's width (about 15 characters an inch at
    the caption's size)."""
    return "\n".join(wrapped(line, max(int(width * 15), 40)) for line in lines if line)


def _left_out(left_out: Mapping[str, str]) -> str:
    """ "Not drawn: jm, jst_1 (why); …" from method → why, methods of one reason together."""
    reasons: dict[str, list[str]] = {}
    for method in _by_registry(list(left_out)):
        reasons.setdefault(left_out[method], []).append(method)
    parts = [f"{', '.join(methods)} ({why})" for why, methods in reasons.items()]
    return f"Not drawn: {'; '.join(parts)}." if parts else ""
