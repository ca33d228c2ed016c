"""Figures of the studies over many runs: robustness across a family (docs/intensity.md) and
representation curves (docs/representations.md)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import (
    NullFormatter,
)

from seq2final.reporting.plots.look import (
    MethodStyle,
    _figure,
    _legend_outside,
    _method_legend,
    _style_of,
    _wrapped,
    method_style,
)

# Robustness across a family (docs/intensity.md)

MEASURE_LABELS = {
    "intensity": "intensity (the dial)",
    "w2_covariate": "covariate W2, history → final",
    "nn1": "1-NN distance, history → final",
    "support_intensity": "support intensity I of the final step against the history's",
}


def robustness_lines(
    deltas: pd.DataFrame, slopes: pd.DataFrame, arch: str, title: str, dial: str = "intensity"
) -> Figure:
    """Control+Shift's Figs. 4–6: each method's Δ-accuracy (points: one per member, the mean
    over its seeds) against each shift measure, with its least-squares line; one panel per
    measure. ``dial`` names the intensity's block and unit
    (:func:`seq2final.data.family.intensity_label`)."""
    measures = [m for m in MEASURE_LABELS if m in set(slopes["measure"])]
    figure = _figure(3.6 * len(measures) + 1.6, 3.2)
    cell = deltas[deltas["arch"] == arch]
    methods = sorted(set(cell["method"]))
    for index, measure in enumerate(measures, start=1):
        axis = figure.add_subplot(1, len(measures), index)
        for method in methods:
            style = method_style(method, methods)
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
        label = _wrapped(dial, 40) if measure == "intensity" else MEASURE_LABELS[measure]
        axis.set_xlabel(label, fontsize=8)
        axis.set_ylabel("Δ-accuracy (shifted − clean)" if index == 1 else "", fontsize=8)
        axis.tick_params(labelsize=7)
    figure.suptitle(_wrapped(f"{title} · {arch}", 30 + 40 * len(measures)), fontsize=9)
    _method_legend(figure, methods, among=methods)
    return figure


def slope_against_clean(slopes: pd.DataFrame, measure: str, title: str) -> Figure:
    """Each method and architecture's robustness slope (with its 95 % interval) against its
    clean accuracy: Control+Shift asks whether better models also degrade more slowly. Points
    take their method's look; with several architectures each point names its own."""
    figure = _figure(5.2, 3.4)
    axis = figure.add_subplot()
    rows = slopes[slopes["measure"] == measure]
    named = rows["arch"].nunique() > 1
    drawn = sorted(set(rows["method"]))
    for _, row in rows.iterrows():
        style = method_style(row["method"], drawn)
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
    _method_legend(figure, drawn, among=drawn)
    return figure


def history_value_lines(
    value: pd.DataFrame, reference: str, title: str, dial: str = "intensity"
) -> Figure:
    """Each method's gain over ``reference`` on the final step against the family's intensity
    (``dial``: its block and unit), one panel per architecture: what the history is worth as
    the shift grows."""
    archs = sorted(set(value["arch"]))
    methods = sorted(set(value["method"]))
    among = [*methods, reference]  # the reference is named on the axis: its colour stays its own
    figure = _figure(3.6 * len(archs) + 1.6, 3.2)
    for index, arch in enumerate(archs, start=1):
        axis = figure.add_subplot(1, len(archs), index)
        cell = value[value["arch"] == arch]
        for method in sorted(set(cell["method"])):
            own = cell[cell["method"] == method].sort_values("intensity")
            axis.plot(own["intensity"], own["gain"], markersize=4, linewidth=1.2,
                      **method_style(method, among).line())  # fmt: skip
        axis.axhline(0.0, color="grey", linestyle=":", linewidth=1)
        axis.set_xlabel(_wrapped(dial, 40), fontsize=8)
        axis.set_ylabel(f"final-step accuracy − {reference}" if index == 1 else "", fontsize=8)
        axis.set_title(arch, fontsize=8)
        axis.tick_params(labelsize=7)
    figure.suptitle(_wrapped(title, 10 + 35 * len(archs)), fontsize=9)
    _method_legend(figure, methods, among=among)
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
