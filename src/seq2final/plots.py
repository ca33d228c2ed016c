"""Figures: example-image grids, sub-population membership, shift distances, learning curves.

Functions return matplotlib figures and never write files: Kedro's ``MatplotlibDataset`` saves
them, so where figures go is the catalog's business.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator


def _show(axis: plt.Axes, image: np.ndarray | None) -> None:
    axis.set_xticks([])
    axis.set_yticks([])
    if image is not None:
        axis.imshow(image.transpose(1, 2, 0), interpolation="nearest")


def example_grid(
    images: np.ndarray, labels: np.ndarray, class_names: list[str], title: str, columns: int
) -> Figure:
    """The first image of up to ``columns`` classes, titled with the (possibly flipped) label.

    One grid per step, as in the paper's Figs. 5-6: the same classes across steps show the shift.
    """
    shown = [c for c in range(len(class_names)) if np.any(labels == c)][:columns]
    figure, axes = plt.subplots(
        1, max(len(shown), 1), figsize=(1.3 * max(len(shown), 1), 1.8), squeeze=False
    )
    for axis, label in zip(axes[0], shown, strict=False):
        _show(axis, images[np.flatnonzero(labels == label)[0]])
        axis.set_title(class_names[label], fontsize=7)
    figure.suptitle(title, fontsize=9)
    figure.tight_layout()
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
    figure, axes = plt.subplots(
        len(rows), n_sub, figsize=(1.2 * n_sub + 1.5, 1.1 * len(rows)), squeeze=False
    )
    for row, (label, (step_name, images, labels, subs)) in enumerate(rows):
        for sub in range(n_sub):
            members = np.flatnonzero((labels == label) & (subs == sub))
            _show(axes[row, sub], images[members[0]] if len(members) else None)
            if row % len(steps) == 0:
                axes[row, sub].set_title(subclass_names[label][sub], fontsize=7)
        axes[row, 0].set_ylabel(
            f"{class_names[label]}\n{step_name}", fontsize=6, rotation=0, ha="right", va="center"
        )
    figure.tight_layout()
    return figure


def shift_profile(table: pd.DataFrame, title: str) -> Figure:
    """Normalised distance to the final step, per earlier step, covariate and conditional."""
    figure, axis = plt.subplots(figsize=(4.5, 3))
    for metric, row in table.iterrows():
        axis.plot(range(len(row)), row.to_numpy(dtype=float), marker="o", label=str(metric))
    axis.axhline(1.0, color="grey", linestyle=":", linewidth=1)
    axis.set_xticks(range(len(table.columns)), [str(c) for c in table.columns], fontsize=7)
    axis.set_ylabel("W2 to final ÷ final train-vs-test")
    axis.set_title(title, fontsize=9)
    axis.legend(fontsize=7)
    figure.tight_layout()
    return figure


def learning_curves(curves: pd.DataFrame, title: str) -> Figure:
    """Loss and accuracy per epoch, train and valid, one line style per fit stage.

    Epoch 0 is the model before any update (validation only), so a fine-tuned model's curve starts
    where its historical state stood on the final step.
    """
    figure, (loss_axis, accuracy_axis) = plt.subplots(1, 2, figsize=(9, 3.4))
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
    accuracy_axis.legend(fontsize="small", ncol=1 + len(stages) // 4)
    figure.suptitle(title)
    figure.tight_layout()
    return figure
