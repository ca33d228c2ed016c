"""Figures: example-image grids, sub-population membership, shift distances, learning curves.

Functions return matplotlib figures and never write files: Kedro's ``MatplotlibDataset`` saves
them, so where figures go is the catalog's business.
"""

from __future__ import annotations

import textwrap

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import EngFormatter, LogLocator, MaxNLocator, NullFormatter

from seq2final.methods import paper_columns


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


_SHADES = plt.get_cmap("tab20b").colors
_PALETTE = [
    *plt.get_cmap("tab20").colors,
    *_SHADES[::4],
    *[c for c in _SHADES if c not in _SHADES[::4]],
    *plt.get_cmap("tab20c").colors,
]


def _method_colour(method: str) -> tuple[float, ...]:
    """One colour per method, stable across figures (the paper's column order): ``tab20``'s
    twenty, then the darkest shade of each of ``tab20b``'s five hues, then their other shades
    and ``tab20c``'s, so registered methods (plugins' included) do not share a colour (cycling
    ``tab20`` alone painted ERM and LISA alike); an unregistered name gets the colour after
    them."""
    columns = paper_columns()
    index = columns.index(method) if method in columns else len(columns)
    return _PALETTE[index % len(_PALETTE)]


def _wrapped(text: str, width: int = 70) -> str:
    """Sequence names can be long (``source100:rotation60:...``): titles wrap instead of clipping."""
    return textwrap.fill(text, width)


def _panels(count: int, width: float = 3.6, height: float = 3.0) -> tuple[Figure, np.ndarray]:
    columns = min(count, 3)
    rows = -(-count // columns)
    figure, axes = plt.subplots(
        rows, columns, figsize=(max(width * columns, 5.5), height * rows + 0.5), squeeze=False
    )
    for axis in axes.flat[count:]:
        axis.set_visible(False)
    return figure, axes.flat


def interpolation_panels(paths: dict[str, dict[str, pd.DataFrame]], title: str) -> Figure:
    """Paper Fig. 1: test accuracy along each method's path, one panel per architecture."""
    figure, axes = _panels(len(paths))
    for axis, (arch, methods) in zip(axes, paths.items(), strict=False):
        for method, path in methods.items():
            axis.plot(path["s"], path["test_accuracy"], color=_method_colour(method), label=method)
        axis.set(title=arch, xlabel="s (start → final model)", ylabel="test accuracy", xlim=(0, 1))
        axis.legend(fontsize=6, ncol=2)
    figure.suptitle(_wrapped(title), fontsize=9)
    figure.tight_layout()
    return figure


def _trajectories(axis: plt.Axes, frame: pd.DataFrame, x: str, y: str) -> None:
    for label, rows in frame.groupby("label", sort=False):
        rows = rows.sort_values("point")
        colour = _method_colour(str(label).split(" ")[0])
        axis.plot(rows[x], rows[y], "-", color=colour, alpha=0.6, linewidth=1)
        axis.plot(rows[x].iloc[-1], rows[y].iloc[-1], "o", color=colour, label=str(label))


def shown_layers(layers: list[str]) -> list[str]:
    """The paper's panels: the input conv, the second block, the head, and the whole model."""
    wanted = ["conv1", "layer2" if "layer2" in layers else "layer1", "fc", "model"]
    return [layer for layer in dict.fromkeys(wanted) if layer in layers]


def _layer_panels(
    frame: pd.DataFrame, x: str, y: str, oracle: tuple[float, float], labels: tuple[str, str],
    title: str,
) -> Figure:  # fmt: skip
    """One panel per shown layer: each job's trajectory in (x, y), the oracle marked."""
    layers = shown_layers(list(dict.fromkeys(frame["layer"])))
    figure, axes = _panels(len(layers))
    for axis, layer in zip(axes, layers, strict=False):
        _trajectories(axis, frame[frame["layer"] == layer], x, y)
        axis.plot(*oracle, "kx", markersize=9, label="oracle")
        axis.set(title=layer, xlabel=labels[0], ylabel=labels[1])
    axes[0].legend(fontsize=6, ncol=2)
    figure.suptitle(_wrapped(title), fontsize=9)
    figure.tight_layout()
    return figure


def projection_panels(frame: pd.DataFrame, title: str) -> Figure:
    """Paper Fig. 16: each model's weights in the oracle-centred plane, per layer and overall."""
    labels = ("toward ERM on history", "toward final-step-only")
    return _layer_panels(frame, "x", "y", (0, 0), labels, title)


def svcca_panels(frame: pd.DataFrame, title: str) -> Figure:
    """Paper Fig. 17: SVCCA with the oracle keeping 50 % (x) and 90 % (y) of the variance."""
    labels = ("SVCCA, 50 % variance", "SVCCA, 90 % variance")
    return _layer_panels(frame, "svcca_50", "svcca_90", (1, 1), labels, title)


def adjacency_sweep(trials: pd.DataFrame, references: dict[str, float], title: str) -> Figure:
    """Paper Fig. 9: the joint model's final-step validation accuracy against λ_adj."""
    figure, axis = plt.subplots(figsize=(4.8, 3.4))
    for state, rows in trials.groupby("state"):
        axis.plot(rows["adjacency"], rows["valid_accuracy"], "o", label=f"JM trial ({state})")
    for index, (label, value) in enumerate(references.items()):
        axis.axhline(value, color=f"C{index + 2}", linestyle="--", linewidth=1, label=label)
    axis.set_xscale("log")
    axis.set(xlabel="λ_adj (adjacent-step L2)", ylabel="final-step validation accuracy")
    axis.legend(fontsize=7)
    axis.set_title(_wrapped(title, 55), fontsize=8)
    figure.tight_layout()
    return figure


def result_heatmap(means: pd.DataFrame, title: str) -> Figure:
    """Test accuracy, methods (rows, the paper's order) × architectures; empty where missing."""
    table = means.T
    figure, axis = plt.subplots(
        figsize=(max(3.5 + 0.9 * len(table.columns), 5.0), 1.2 + 0.32 * len(table.index))
    )
    image = axis.imshow(table.to_numpy(dtype=float), cmap="viridis", aspect="auto")
    for (row, column), value in np.ndenumerate(table.to_numpy(dtype=float)):
        if not np.isnan(value):
            axis.text(column, row, f"{value:.2f}", ha="center", va="center", fontsize=7,
                      color="white" if value < np.nanmean(table.to_numpy(dtype=float)) else "black")  # fmt: skip
    axis.set_xticks(range(len(table.columns)), list(table.columns), rotation=30, fontsize=7)
    axis.set_yticks(range(len(table.index)), list(table.index), fontsize=7)
    figure.colorbar(image, ax=axis, label="test accuracy")
    axis.set_title(_wrapped(title, 55), fontsize=8)
    figure.tight_layout()
    return figure


def protocol_figure(rows: list[dict], protocol: str, title: str) -> Figure:
    """One line per method over time, means over seeds: for ``eval_stream`` each time's window
    average with the band down to its worst step shaded; for ``test_then_train`` the accuracy on
    each step before training on it; for ``eval_fix`` and ``mixed_split`` the accuracy on each
    later step."""
    figure, axis = plt.subplots(figsize=(6.4, 3.8))
    methods = [m for m in paper_columns() if any(r["method"] == m for r in rows)]
    methods += sorted({r["method"] for r in rows} - set(methods))
    for method in methods:
        mine = [r for r in rows if r["method"] == method]
        if protocol == "eval_stream":
            frame = pd.DataFrame([t for r in mine for t in r["per_time"]])
            means = frame.groupby("time")[["average", "worst"]].mean()
            x, y = means.index, means["average"]
            axis.fill_between(x, means["worst"], y, color=_method_colour(method), alpha=0.15)
        else:
            column = "curve" if protocol == "test_then_train" else "ood_per_step"
            frame = pd.DataFrame([{"step": int(s), "accuracy": a} for r in mine
                                  for s, a in r[column].items()])  # fmt: skip
            means = frame.groupby("step")["accuracy"].mean()
            x, y = means.index, means
        axis.plot(x, y, marker="o", markersize=3, color=_method_colour(method), label=method)
    axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    xlabel = {"eval_stream": "time t (model of steps 0..t)",
              "test_then_train": "step t (predicted by the model of steps 0..t-1)"}  # fmt: skip
    axis.set(xlabel=xlabel.get(protocol, "later step"), ylabel="accuracy")
    low, high = axis.get_ylim()  # the data's range: methods a few points apart stay apart
    axis.set_ylim(max(0.0, low - 0.02), min(1.0, high + 0.02))
    if protocol == "eval_stream":
        axis.set_title("window average (line) down to the window's worst step (band)", fontsize=8)
    axis.legend(fontsize="small", ncol=2, loc="best")
    figure.suptitle(_wrapped(title), fontsize=10)
    figure.tight_layout()
    return figure


def _label_flops(axis: Axes, flops: pd.Series) -> None:
    """Ticks of a log FLOPs axis in engineering units (``50 TFLOP``): at 1, 2 and 5 times each
    power of ten when the points span under two decades (a decade alone can leave the axis
    without a labelled tick), at the powers of ten otherwise; minor ticks unlabelled."""
    span = np.log10(flops.max() / flops.min()) if len(flops) and flops.min() > 0 else 0.0
    axis.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0) if span < 2 else (1.0,)))
    axis.xaxis.set_major_formatter(EngFormatter(unit="FLOP"))
    axis.xaxis.set_minor_formatter(NullFormatter())


def compute_pareto(
    points: pd.DataFrame,
    title: str,
    accuracy: str = "test accuracy",
    compute: str = "training FLOPs (historical state included, every trial)",
) -> Figure:
    """Test accuracy against total training FLOPs (log scale), one point per method, with the
    Pareto front (no other method both cheaper and more accurate) joined by a line and ringed
    (a front of one point shows too), as NED plots accuracy against compute. ``points``: method,
    train_flops, test_accuracy; ``accuracy`` and ``compute`` label the axes (a protocol's score,
    the FLOPs of all its views)."""
    figure, axis = plt.subplots(figsize=(6.4, 4.2))
    for row in points.itertuples():
        axis.scatter(row.train_flops, row.test_accuracy, color=_method_colour(row.method), s=24)
        axis.annotate(row.method, (row.train_flops, row.test_accuracy), fontsize=7,
                      xytext=(3, 3), textcoords="offset points")  # fmt: skip
    ordered = points.sort_values(["train_flops", "test_accuracy"], ascending=[True, False])
    front, best = [], -np.inf
    for row in ordered.itertuples():
        if row.test_accuracy > best:
            front.append((row.train_flops, row.test_accuracy))
            best = row.test_accuracy
    if front:
        axis.plot(*zip(*front, strict=True), "--o", color="grey", linewidth=1, markersize=9,
                  markerfacecolor="none", label="Pareto front")  # fmt: skip
        axis.legend(fontsize="small", loc="lower right")
    axis.set(xscale="log", xlabel=compute, ylabel=accuracy)
    _label_flops(axis, points["train_flops"])
    figure.suptitle(_wrapped(title), fontsize=10)
    figure.tight_layout()
    return figure
