"""The paper's per-layer figures of finished jobs (Appendix G.2): each model's weights
projected around the oracle's, and its representations' SVCCA with the oracle's, a panel per
layer."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from seq2final.reporting.plots.labels import _place_labels
from seq2final.reporting.plots.look import (
    _by_registry,
    _caption,
    _left_out,
    _panels,
    method_legend,
    method_style,
    wrapped,
)


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


_SPOT = 0.03  # share of an axis' range: ends closer than this on both axes share one spot
_MOST_NAMED = 2  # a spot of more methods than this is named by a letter, explained below


def _letter(index: int) -> str:
    """A, B, …, Z, then AA, AB, …: the tags of crowded spots."""
    return (_letter(index // 26 - 1) if index >= 26 else "") + chr(ord("A") + index % 26)


def _spots(
    points: Sequence[tuple[float, float, str]], span: tuple[float, float]
) -> list[tuple[float, float, list[str]]]:
    """Points (x, y, name) gathered where they lie within :data:`_SPOT` of an axis' ``span`` of
    the first point of a spot, in the order given: the methods a reader sees as one marker."""
    spots: list[tuple[float, float, list[str]]] = []
    for x, y, name in points:
        if not (np.isfinite(x) and np.isfinite(y)):
            continue
        near = next(
            (s for s in spots
             if abs(s[0] - x) <= _SPOT * span[0] and abs(s[1] - y) <= _SPOT * span[1]),
            None,
        )  # fmt: skip
        if near is None:
            spots.append((x, y, [name]))
        else:
            near[2].append(name)
    return spots


def _layer_panels(
    frame: pd.DataFrame, x: str, y: str, oracle: tuple[float, float], labels: tuple[str, str],
    title: str, reading: str, left_out: Mapping[str, str],
) -> Figure | None:  # fmt: skip
    """One panel per shown layer with something to draw: each job's final model marked with the
    method's look, the models before it (its start, a chain's model of each step) as small
    dots joined to it by a thin line, the oracle marked. A method is named beside its marker
    where the name has room next to it; a spot shared by more than two methods is named by a
    letter, and the caption under the figure lists each letter's methods (sixteen names on one
    spot were a text block over the panel), says how to read the axes (``reading``) and which
    methods are not drawn and why (``left_out``: method → why). None when no layer has a
    point."""
    layers = _drawn_layers(frame, x, y)
    if not layers:
        return None
    figure, axes = _panels(len(layers), width=3.9, height=3.4, extra=1.4)
    ends: dict[Axes, list[tuple[float, float, str]]] = {}
    paths: dict[Axes, list[list[tuple[float, float]]]] = {}
    for axis, layer in zip(axes, layers, strict=True):
        mine = frame[frame["layer"] == layer]
        ends[axis], paths[axis] = [(*oracle, "oracle")], []
        for label in _by_registry([str(n) for n in dict.fromkeys(mine["label"])]):
            rows = mine[mine["label"] == label].sort_values("point")
            style = method_style(label)
            if len(rows) > 1:
                axis.plot(rows[x], rows[y], color=style.colour, linestyle=style.linestyle,
                          alpha=0.35, linewidth=0.8, marker=".", markersize=3)  # fmt: skip
                paths[axis].append(list(zip(rows[x].astype(float), rows[y].astype(float),
                                            strict=True)))  # fmt: skip
            end = (float(rows[x].iloc[-1]), float(rows[y].iloc[-1]))
            axis.plot(*end, marker=style.marker, color=style.colour, markersize=6, linestyle="",
                      gid=label)  # fmt: skip
            ends[axis].append((*end, label))
        oracle_style = method_style("oracle")
        axis.plot(*oracle, marker=oracle_style.marker, color=oracle_style.colour, markersize=9,
                  markeredgecolor="black", linestyle="", gid="oracle")  # fmt: skip
        axis.set_title(layer if layer != "model" else "whole model")
        axis.set_xlabel(labels[0], fontsize=8)
        axis.set_ylabel(labels[1], fontsize=8)
        axis.margins(0.1)
    tags: dict[tuple[str, ...], str] = {}
    named: dict[Axes, list[tuple[float, float, str]]] = {}
    for axis in axes:
        (x0, x1), (y0, y1) = axis.get_xlim(), axis.get_ylim()  # autoscaled, before the layout
        named[axis] = []
        for sx, sy, names in _spots(ends[axis], (x1 - x0, y1 - y0)):
            if len(names) > _MOST_NAMED:
                tag = tags.setdefault(tuple(names), _letter(len(tags)))
                named[axis].append((sx, sy, tag))
            else:
                named[axis] += [(sx, sy, name) for name in names]
    figure.suptitle(wrapped(title), fontsize=9)
    path = Line2D([], [], color="grey", alpha=0.6, linewidth=0.8, marker=".", markersize=4)
    method_legend(figure, ["oracle", *(str(n) for n in dict.fromkeys(frame["label"]))],
                   [(path, "models before\nthe final one")])  # fmt: skip
    spots = [f"{tag}: {', '.join(names)}" for names, tag in tags.items()]
    caption = [reading]
    if any(paths.values()):
        caption.append(
            "Marker: a method's final model; small dots on a thin line in its colour: the models "
            "it passed through before (the model it started from, a sequential method's model "
            "of each step)."
        )
    caption.append(_left_out(left_out))
    if spots:
        caption.append(f"Methods on one spot: {'; '.join(spots)}.")
    figure.supxlabel(_caption(caption, figure.get_figwidth()), fontsize=7.5, x=0.01, ha="left",
                     multialignment="left")  # fmt: skip
    _place_labels(list(named.items()), paths=paths, leaders=False,
                  colours={tag: "#333333" for tag in tags.values()})  # fmt: skip
    return figure


def projection_panels(
    frame: pd.DataFrame, title: str, left_out: Mapping[str, str] | None = None
) -> Figure | None:
    """Paper Fig. 16: each model's weights in the oracle-centred plane, per layer and overall;
    None when there is nothing to draw. ``left_out``: methods of the group not drawn, each with
    why (their models' weights have other shapes), named under the figure so a reader does not
    look for them in vain."""
    labels = ("toward ERM on steps 0..T−1 (FT's start)", "toward ERM on the final step (baseline)")
    reading = (
        "Origin: the oracle's weights. A model's weights minus the oracle's, projected on the "
        "direction from the oracle to ERM trained on the historical steps 0..T−1 (x) and to "
        "the baseline trained on the final step alone (y); Euclidean units, axes not orthogonal."
    )
    return _layer_panels(frame, "x", "y", (0, 0), labels, title, reading, left_out or {})


def svcca_panels(
    frame: pd.DataFrame, title: str, left_out: Mapping[str, str] | None = None
) -> Figure | None:
    """Paper Fig. 17: SVCCA with the oracle keeping 50 % (x) and 90 % (y) of the variance; None
    when there is nothing to draw. ``left_out`` as for :func:`projection_panels`."""
    labels = ("SVCCA with the oracle, 50 % of variance", "SVCCA with the oracle, 90 % of variance")
    reading = (
        "How alike each model's activations are to the oracle's on final-step test images "
        "(SVCCA, 1 = the same representation; the oracle sits at 1, 1), keeping the directions "
        "that hold 50 % (x) or 90 % (y) of the variance."
    )
    return _layer_panels(
        frame, "svcca_50", "svcca_90", (1, 1), labels, title, reading, left_out or {}
    )
