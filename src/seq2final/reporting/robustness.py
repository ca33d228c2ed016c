"""Robustness slopes and history's value across a family of sequences (docs/intensity.md).

Control+Shift summarises how fast a model degrades by its **robustness slope**: the
least-squares slope of the accuracy drop against the shift's size, across the intensities of one
shift. Here a family's members are sequences that differ only in intensity, each trained on its
own; a method's drop at a member is its accuracy at the family's reference member (the smallest
intensity, the clean one when the family includes 0) minus its accuracy there, same architecture
and seed, and the size of the shift is each member's measured distance between its source and
its final step (W2 and 1-NN from ``quantify_shift``, and Control+Shift's intensity I where the
family's blocks give it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy import stats

CONFIDENCE = 0.95
POINT_COLUMNS = ("intensity", "method", "arch", "seed", "accuracy")


def accuracy_drops(points: pd.DataFrame) -> pd.DataFrame:
    """``points`` with ``clean`` (the same method, architecture and seed at the family's
    smallest intensity) and ``drop`` (clean minus accuracy) added; cells without a clean point
    are left out, since their drop has nothing to start from."""
    reference = points["intensity"].min()
    clean = points[points["intensity"] == reference][["method", "arch", "seed", "accuracy"]]
    merged = points.merge(
        clean.rename(columns={"accuracy": "clean"}), on=["method", "arch", "seed"], how="inner"
    )
    merged["drop"] = merged["clean"] - merged["accuracy"]
    return merged.sort_values(["method", "arch", "seed", "intensity"], ignore_index=True)


def fit_line(x: Sequence[float], y: Sequence[float]) -> dict[str, float]:
    """The least-squares line of ``y`` on ``x``: slope, its two-sided 95 % interval (Student's t
    with n − 2 degrees of freedom), intercept and R². With two points the interval and R² say
    nothing, so they are NaN; with fewer, or no spread in ``x``, everything is."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    nothing = {"slope": math.nan, "low": math.nan, "high": math.nan, "intercept": math.nan,
               "r2": math.nan, "points": len(x)}  # fmt: skip
    if len(x) < 2 or np.ptp(x) == 0:
        return nothing
    fit = stats.linregress(x, y)
    if len(x) == 2:
        return {**nothing, "slope": fit.slope, "intercept": fit.intercept}
    half = stats.t.ppf(0.5 + CONFIDENCE / 2, len(x) - 2) * fit.stderr
    return {"slope": fit.slope, "low": fit.slope - half, "high": fit.slope + half,
            "intercept": fit.intercept, "r2": fit.rvalue**2, "points": len(x)}  # fmt: skip


def robustness_slopes(drops: pd.DataFrame, measures: Sequence[str]) -> pd.DataFrame:
    """One row per method, architecture and shift measure: the line of the drop on the measure
    over every (member, seed) point, and the mean clean accuracy (Control+Shift plots the slope
    against it)."""
    rows = []
    for (method, arch), cell in drops.groupby(["method", "arch"], sort=True):
        for measure in measures:
            if measure not in cell or cell[measure].isna().all():
                continue
            usable = cell.dropna(subset=[measure])
            rows.append({"method": method, "arch": arch, "measure": measure,
                         **fit_line(usable[measure], usable["drop"]),
                         "clean_accuracy": usable["clean"].mean(),
                         "seeds": usable["seed"].nunique()})  # fmt: skip
    return pd.DataFrame(rows)


def history_value(points: pd.DataFrame, reference: str) -> pd.DataFrame:
    """Each method's gain in final-step accuracy over ``reference`` (the model trained on the
    final step alone) at every intensity, paired by architecture and seed, averaged over them:
    what the sequence's history is worth as the shift grows."""
    base = points[points["method"] == reference][["intensity", "arch", "seed", "accuracy"]]
    paired = points[points["method"] != reference].merge(
        base.rename(columns={"accuracy": "reference"}), on=["intensity", "arch", "seed"]
    )
    paired["gain"] = paired["accuracy"] - paired["reference"]
    summary = paired.groupby(["method", "arch", "intensity"], sort=True).agg(
        gain=("gain", "mean"), accuracy=("accuracy", "mean"), reference=("reference", "mean"),
        seeds=("seed", "nunique"),
    )  # fmt: skip
    return summary.reset_index()
