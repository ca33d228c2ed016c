"""Figures of the studies over many runs: robustness across a family (docs/intensity.md). The
data-efficiency curves' figures live with the curves (:mod:`seq2final.representations`)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from seq2final.reporting.plots.look import (
    method_legend,
    method_style,
    new_figure,
    wrapped,
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
    figure = new_figure(3.6 * len(measures) + 1.6, 3.2)
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
        label = wrapped(dial, 40) if measure == "intensity" else MEASURE_LABELS[measure]
        axis.set_xlabel(label, fontsize=8)
        axis.set_ylabel("Δ-accuracy (shifted − clean)" if index == 1 else "", fontsize=8)
        axis.tick_params(labelsize=7)
    figure.suptitle(wrapped(f"{title} · {arch}", 30 + 40 * len(measures)), fontsize=9)
    method_legend(figure, methods, among=methods)
    return figure


def slope_against_clean(slopes: pd.DataFrame, measure: str, title: str) -> Figure:
    """Each method and architecture's robustness slope (with its 95 % interval) against its
    clean accuracy: Control+Shift asks whether better models also degrade more slowly. Points
    take their method's look; with several architectures each point names its own."""
    figure = new_figure(5.2, 3.4)
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
    axis.set_title(wrapped(title, 55), fontsize=9)
    method_legend(figure, drawn, among=drawn)
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
    figure = new_figure(3.6 * len(archs) + 1.6, 3.2)
    for index, arch in enumerate(archs, start=1):
        axis = figure.add_subplot(1, len(archs), index)
        cell = value[value["arch"] == arch]
        for method in sorted(set(cell["method"])):
            own = cell[cell["method"] == method].sort_values("intensity")
            axis.plot(own["intensity"], own["gain"], markersize=4, linewidth=1.2,
                      **method_style(method, among).line())  # fmt: skip
        axis.axhline(0.0, color="grey", linestyle=":", linewidth=1)
        axis.set_xlabel(wrapped(dial, 40), fontsize=8)
        axis.set_ylabel(f"final-step accuracy − {reference}" if index == 1 else "", fontsize=8)
        axis.set_title(arch, fontsize=8)
        axis.tick_params(labelsize=7)
    figure.suptitle(wrapped(title, 10 + 35 * len(archs)), fontsize=9)
    method_legend(figure, methods, among=among)
    return figure
