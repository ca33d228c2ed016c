"""Figures of the data-efficiency curves (docs/representations.md): the curves themselves and
P_rep against the steps a history holds (Feature Forgetting's Fig. 2)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import NullFormatter

from seq2final.reporting.plots.look import (
    MethodStyle,
    legend_outside,
    new_figure,
    style_of,
    wrapped,
)

KIND_NAMES = {"ft": "FT: every layer fine-tuned", "lp": "LP: the head alone"}
"""The panel titles of the curve kinds."""


def representation_curves(table: pd.DataFrame, title: str, reference: str | None = None) -> Figure:
    """Feature Forgetting's learning curves: test accuracy on the final step against the size of
    the training subset it was fine-tuned (FT) or probed (LP) on, log scale, one line per
    historical state (means over seeds, bars one standard deviation where there are several),
    a panel per kind; the ``reference`` state (a fresh model's) in black, dashed. ``table``:
    :func:`seq2final.representations.tables.curve_table`'s rows of one architecture and view."""
    kinds = list(dict.fromkeys(table["kind"]))
    figure = new_figure(4.2 * len(kinds) + 1.8, 3.8)
    axes = np.atleast_1d(figure.subplots(1, len(kinds), sharey=True))
    states = list(dict.fromkeys(table["state"]))
    drawn = [state for state in states if state != reference]
    styles = {state: style_of(index) for index, state in enumerate(drawn)}
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
    figure.suptitle(wrapped(title), fontsize=10)
    handles = [Line2D([], [], **styles[s].line(), markersize=6) for s in states]
    legend_outside(figure, handles, states)
    return figure


def p_rep_by_history(table: pd.DataFrame, title: str, reference: str | None = None) -> Figure:
    """P_rep against the number of steps each state trained on (Feature Forgetting's Fig. 2:
    does the representation keep improving as history grows?), one line per historical mode, a
    panel per kind, bars one standard deviation over seeds; the ``reference`` (a fresh model's,
    no history) as a dashed black level. ``table``: :func:`seq2final.representations.tables.p_rep_table`'s
    rows of one architecture and tested view."""
    kinds = list(dict.fromkeys(table["kind"]))
    figure = new_figure(3.8 * len(kinds) + 1.8, 3.6)
    axes = np.atleast_1d(figure.subplots(1, len(kinds), sharey=True))
    drawn = [s for s in dict.fromkeys(table["state"]) if s != reference]
    styles = {state: style_of(index) for index, state in enumerate(drawn)}
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
    figure.suptitle(wrapped(title), fontsize=10)
    labels = [*drawn, *([f"{reference} (FT)"] if reference in set(table["state"]) else [])]
    handles = [Line2D([], [], **styles[s].line(), markersize=6) for s in drawn]
    handles += [Line2D([], [], color="#000000", linestyle="--")] * (len(labels) - len(drawn))
    legend_outside(figure, handles, labels)
    return figure
