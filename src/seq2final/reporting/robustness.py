"""Robustness slopes and history's value across a family of sequences (docs/intensity.md).

Control+Shift summarises how fast a model degrades by its **robustness slope**: the
least-squares slope of its Δ-accuracy (shifted minus clean) against the shift's size, across the
intensities of one shift; 0 is robust and a steep negative slope degrades fast. Here a family's
members are sequences that differ only in intensity, each trained on its own; a method's
Δ-accuracy at a member is its accuracy there minus its accuracy at the family's reference member
(intensity 0 where the family has it, else its smallest), same architecture, each averaged over
the seeds both have, and the size of the shift is each member's measured distance between the
images its historical model trained on (steps 0..T−1) and its final step, at each seed's own
draw (W2 and 1-NN from ``quantify_shift``, and the counted support intensity against those
steps' supports where the family's blocks give one).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

CONFIDENCE = 0.95


def history_distances(frame: pd.DataFrame | None) -> dict[str, float]:
    """The member's measured distances from the images its historical model trained on (steps
    0..T−1 pooled) to its final test images, and the final step's I against their supports:
    ``quantify_shift``'s ``history_to_final`` row. A frame measured before that row existed
    has it only where the history is one step (its first ``to_final`` row); otherwise none."""
    if frame is None:
        return {}
    rows = frame[frame["comparison"] == "history_to_final"]
    if rows.empty:
        to_final = frame[frame["comparison"] == "to_final"]
        if len(to_final) != 2:
            return {}
        rows = to_final
    row = rows.iloc[0]
    return {m: float(row[m]) for m in ("w2_covariate", "nn1", "support_intensity") if m in row}


def accuracy_deltas(points: pd.DataFrame) -> pd.DataFrame:
    """One row per member, method and architecture: the accuracy and shift measures averaged
    over seeds, ``clean`` (the same method and architecture at the reference member) and
    ``delta`` (accuracy minus clean). Seeds are averaged before the line is fitted: a seed's
    points share its clean accuracy, so pooling them would count one draw several times and
    narrow the interval."""
    reference = 0.0 if (points["intensity"] == 0).any() else points["intensity"].min()
    keys = [k for k in ("method", "arch", "intensity", "sequence") if k in points]
    values = [c for c in points.columns if c not in (*keys, "seed")]
    grouped = points.groupby(keys, as_index=False, sort=True)
    means = grouped[values].mean()
    means["seeds"] = grouped["seed"].nunique()["seed"].to_numpy()
    clean = means[means["intensity"] == reference][["method", "arch", "accuracy"]]
    merged = means.merge(clean.rename(columns={"accuracy": "clean"}), on=["method", "arch"])
    merged["delta"] = merged["accuracy"] - merged["clean"]
    return merged.sort_values(["method", "arch", "intensity"], ignore_index=True)


def fit_line(x: Sequence[float], y: Sequence[float]) -> dict[str, float]:
    """The least-squares line of ``y`` on ``x``: slope, its two-sided 95 % interval (Student's t
    with n − 2 degrees of freedom), intercept and R². With two points the interval and R² say
    nothing, so they are NaN; with fewer, or no spread in ``x``, everything is."""
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    nothing = {"slope": math.nan, "low": math.nan, "high": math.nan, "intercept": math.nan,
               "r2": math.nan, "points": len(xs)}  # fmt: skip
    if len(xs) < 2 or np.ptp(xs) == 0:
        return nothing
    from scipy import stats  # lazy: see docs/architecture.md, "Start-up"

    fit = stats.linregress(xs, ys)
    if len(xs) == 2:
        return {**nothing, "slope": fit.slope, "intercept": fit.intercept}
    half = stats.t.ppf(0.5 + CONFIDENCE / 2, len(xs) - 2) * fit.stderr
    return {"slope": fit.slope, "low": fit.slope - half, "high": fit.slope + half,
            "intercept": fit.intercept, "r2": fit.rvalue**2, "points": len(xs)}  # fmt: skip


def robustness_slopes(deltas: pd.DataFrame, measures: Sequence[str]) -> pd.DataFrame:
    """One row per method, architecture and shift measure: the line of Δ-accuracy on the
    measure over the family's members, and the clean accuracy (Control+Shift plots the slope
    against it)."""
    rows = []
    for (method, arch), cell in deltas.groupby(["method", "arch"], sort=True):
        for measure in measures:
            if measure not in cell or cell[measure].isna().all():
                continue
            usable = cell.dropna(subset=[measure])
            rows.append({"method": method, "arch": arch, "measure": measure,
                         **fit_line(usable[measure], usable["delta"]),
                         "clean_accuracy": usable["clean"].iloc[0],
                         "seeds": int(usable["seeds"].min())})  # fmt: skip
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
