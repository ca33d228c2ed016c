"""Figures of sequences and their shifts: example images, sub-population membership, shift
distances."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from seq2final.reporting.plots.look import LABEL_FONTSIZE, new_figure, wrapped


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
    # a user's class names are words: each wrapped at 10 characters a line, and a column as wide
    # as its longest line (about 0.07 inch a character at the label size), so a cell is at most
    # 0.8 inch a side however long a name; a few classes still leave the title its room
    names = [textwrap.fill(str(class_names[c]), 10) for c in shown]
    cell = max(0.55, 0.07 * max(len(line) for name in names for line in name.split("\n")) + 0.1)
    inches = max(3.2, 0.5 + cell * len(shown))
    lines = max(name.count("\n") + 1 for name in names)  # the names' own height, above
    figure = new_figure(inches, 0.9 + 0.12 * lines + cell * len(steps))  # square cells
    axis = figure.add_subplot()
    axis.imshow(montage, interpolation="nearest")
    axis.set_xticks([c * (width + gap) + width / 2 for c in range(len(shown))])
    axis.set_xticklabels(names, fontsize=LABEL_FONTSIZE)
    axis.xaxis.tick_top()
    axis.set_xlabel(
        wrapped("class label of each image (after a label flip: its new label)", int(inches * 15)),
        fontsize=LABEL_FONTSIZE,
    )
    axis.xaxis.set_label_position("top")
    axis.set_yticks([r * (height + gap) + height / 2 for r in range(len(steps))])
    axis.set_yticklabels(
        [f"step {i}: {name}" for i, (name, _, _) in enumerate(steps)], fontsize=LABEL_FONTSIZE
    )
    axis.tick_params(length=0)
    for spine in axis.spines.values():
        spine.set_visible(False)
    figure.suptitle(wrapped(title, int(inches * 13)), fontsize=9)
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
    figure = new_figure(1.2 * n_sub + 1.5, 1.1 * len(rows))
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


_MEASURES = {
    "W_X": r"images: W2 over all images ($W_X$)",
    "W_X|Y": r"classes: W2 within each class ($W_{X|Y}$)",
    "1-NN": "nearest neighbour: mean distance of a final test image to its closest training image",
}


def shift_profile(
    table: pd.DataFrame, title: str, subtitle: str = "", steps: Sequence[str] = ()
) -> Figure:
    """Normalised distance to the final step, per earlier step: covariate and conditional W2 and
    the 1-NN distance. ``table``: a row per measure, a column per earlier step (the tables'
    ``W^{t,T}``); ``steps`` names those steps (``0:source``) for the ticks. The ticks and the
    legend are words and mathtext, never the tables' raw TeX; the title is the sequence in words,
    its content key at most the small ``subtitle``."""
    figure = new_figure(6.0, 3.6)
    axis = figure.add_subplot()
    for metric, row in table.iterrows():
        axis.plot(range(len(row)), row.to_numpy(dtype=float), marker="o",
                  label=_MEASURES.get(str(metric), str(metric)))  # fmt: skip
    axis.axhline(1.0, color="grey", linestyle=":", linewidth=1,
                 label="1 = no more shift than between the final train and test sets")  # fmt: skip
    names = [str(c) for c in table.columns]
    if len(steps) == len(names):
        names = [_step_name(step) for step in steps]
    axis.set_xticks(range(len(table.columns)), names, fontsize=7)
    axis.margins(x=0.12)  # the first and last step names stay over the axes
    axis.set_xlabel("earlier step (its training set against the final test set)", fontsize=8)
    axis.set_ylabel("distance to the final test set\n÷ final train-vs-test distance", fontsize=8)
    axis.set_ylim(bottom=min(0.0, axis.get_ylim()[0]))
    figure.suptitle(wrapped(title, 70), fontsize=9)
    if subtitle:
        axis.set_title(subtitle, fontsize=6, color="0.4")
    figure.legend(loc="outside lower center", fontsize=7, frameon=False, ncol=1)
    return figure


def _step_name(step: str) -> str:
    """``2:label_flip`` → ``step 2: label flip``."""
    index, _, name = step.partition(":")
    return f"step {index}: {name.replace('_', ' ')}" if name else step
