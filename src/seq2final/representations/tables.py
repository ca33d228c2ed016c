"""Tables of the data-efficiency curves (docs/representations.md): the curves' points, averaged
over seeds, and P_rep, each curve's mean test accuracy over its sizes (Feature Forgetting's Eq. 1
averaged over its subsampled training sets)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import pandas as pd

from seq2final.core.errors import Seq2FinalError
from seq2final.data.spec import SequenceSpec
from seq2final.representations.fit import SCRATCH

CURVE = ["budget", "view", "arch", "state", "history", "kind"]
"""What names one curve (per seed): ``view`` is the view whose final step it is tested on,
``history`` how many steps the state trained on."""


def sequence_curves(spec: SequenceSpec, points: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """Every stored point of ``spec``'s sequence, any architecture or seed: matched by name and
    dataset, each from this specification at its own seed (as result records are)."""
    rows = []
    for key in points:
        frame = points[key]
        mine = frame[(frame["sequence"] == spec.name) & (frame["dataset"] == spec.dataset)]
        rows += [row for _, row in mine.iterrows()
                 if row["sequence_key"] == dataclasses.replace(spec, seed=int(row["seed"])).key]  # fmt: skip
    frame = pd.DataFrame(rows).reset_index(drop=True)
    if frame.empty:
        return frame
    frame["view"] = frame["view"].fillna("")
    if "history" not in frame:  # points stored before histories were recorded
        frame["history"] = None
    unknown = frame["history"].isna()
    if unknown.any():
        frame["history"] = frame["history"].astype("object")
        frame.loc[unknown, "history"] = [_history(r, spec) for _, r in frame[unknown].iterrows()]
    frame["history"] = frame["history"].astype("int64")
    twice = frame[frame.duplicated([*CURVE, "size", "seed"], keep=False)]
    if not twice.empty:  # another setting under one budget name: not a second seed
        first = twice.iloc[0]
        raise Seq2FinalError(
            f"two curve points of {first['state']} {first['kind']} at size {first['size']} on "
            f"{first['arch']} with budget {first['budget']} and seed {first['seed']}: their "
            "settings differ (max_epochs, patience or the engine); delete the stale ones in "
            "data/07_model_output/representation_curves or give the settings a budget name of "
            "their own"
        )
    return frame


def _history(row: pd.Series, spec: SequenceSpec) -> int:
    """The steps a point's state trained on, for a point stored without them (always tested on
    its own view's final step then): none for the fresh model, steps 0..t−1 of a view ``0-t``
    or ``mixed-0-t``, every historical step of the whole sequence."""
    if row["state"] == SCRATCH:
        return 0
    return int(row["view"].rsplit("-", 1)[1]) if row["view"] else len(spec.steps) - 1


def curve_table(points: pd.DataFrame) -> pd.DataFrame:
    """Each curve's test accuracy at each size, in order of size: mean and standard deviation
    over seeds, with the seeds counted and the mean training FLOPs of one fit."""
    grouped = points.groupby([*CURVE, "size"])
    return (
        grouped.agg(
            test_accuracy=("test_accuracy", "mean"),
            std=("test_accuracy", "std"),
            seeds=("seed", "nunique"),
            train_flops=("train_flops", "mean"),
        )
        .reset_index()
        .astype({"train_flops": "int64"})
    )


def p_rep_table(points: pd.DataFrame) -> pd.DataFrame:
    """P_rep of each curve: per seed the mean over its sizes, then mean and standard deviation
    over seeds; beside it the FLOPs of the whole curve (every size's fit), averaged over seeds,
    and the sizes it averages."""
    per_seed = points.groupby([*CURVE, "seed"], sort=False).agg(
        p_rep=("test_accuracy", "mean"),
        train_flops=("train_flops", "sum"),
        sizes=("size", lambda s: " ".join(str(v) for v in sorted(s))),
    )
    return (
        per_seed.groupby(CURVE, sort=False)
        .agg(
            p_rep=("p_rep", "mean"),
            std=("p_rep", "std"),
            seeds=("p_rep", "size"),
            train_flops=("train_flops", "mean"),
            sizes=("sizes", "first"),
        )
        .reset_index()
        .astype({"train_flops": "int64"})
    )
