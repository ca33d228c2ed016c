"""Figures of finished jobs: learning curves and the paper's figures (interpolation, adjacency,
heat maps, protocols, forgetting, compute; the per-layer projection and SVCCA are in
``layers``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.lines import Line2D
from matplotlib.textpath import TextPath
from matplotlib.ticker import (
    EngFormatter,
    FuncFormatter,
    LogLocator,
    MaxNLocator,
    NullFormatter,
)

from seq2final.reporting.plots.labels import _place_labels
from seq2final.reporting.plots.look import (
    _MARKERS,
    LEGEND_FONTSIZE,
    _by_registry,
    _caption,
    _left_out,
    _panels,
    legend_outside,
    method_legend,
    method_style,
    new_figure,
    wrapped,
)
from seq2final.reporting.protocols import ProtocolScore

# Learning curves


def _curve_legend(
    stages: Sequence[str], names: Mapping[str, str] | None = None
) -> tuple[list[Line2D], list[str]]:
    """The learning curves' legend: train dashed and valid solid once, then, where a job has
    several fit stages, the colour of each (``C<index>``, in the stages' order), named as
    ``names`` says (the record's :meth:`~seq2final.training.records.ResultRecord.stage_labels`:
    SFT's ``exponential_2e-4_0.5/final`` read as its schedule, step and learning rate), else
    ``stage <name>``."""
    handles = [Line2D([], [], color="black", linestyle=s) for s in ("--", "-")]
    labels = ["train", "valid"]
    if len(stages) > 1:
        handles += [Line2D([], [], color=f"C{i % 10}") for i in range(len(stages))]
        names = names or {}
        labels += [names.get(stage, f"stage {stage}") for stage in stages]
    return handles, labels


def learning_curves(
    curves: pd.DataFrame, title: str, names: Mapping[str, str] | None = None
) -> Figure:
    """Loss and accuracy per epoch, train and valid, one colour per fit stage.

    Epoch 0 is the model before any update (validation only), so a fine-tuned model's curve starts
    where its historical state stood on the final step. The legend lies under the panels: train
    dashed and valid solid once, then a colour per stage (SFT's five schedules made ten entries
    that covered its curves inside the axes), each named as ``names`` says (by stage: its
    schedule, step and learning rate).
    """
    stages = list(dict.fromkeys(curves["stage"]))
    handles, labels = _curve_legend(stages, names)
    # as many columns as the longest entry lets fit in the figure's 9 inches (8-point text is
    # ~0.062 in a character; the handle and the gaps ~0.8 in): SFT's are two
    longest = max(map(len, labels))
    columns = max(1, min(len(labels), 4, int(8.8 // (0.062 * longest + 0.8))))
    rows = -(-len(labels) // columns) if stages else 0
    # Fixed margins: constrained layout measured every label again for each job's figure, half
    # of the figure's cost, where this layout never changes (one per job a run logs to MLflow).
    legend = 0.2 * rows + 0.1 if rows else 0.0  # inches under the axis labels
    height = 3.4 + legend
    figure = new_figure(9, height, layout=None)
    figure.subplots_adjust(left=0.1, right=0.985, bottom=(0.48 + legend) / height,
                           top=1 - 0.6 / height, wspace=0.25)  # fmt: skip
    loss_axis, accuracy_axis = figure.subplots(1, 2)
    for index, stage in enumerate(stages):
        rows_of = curves[curves["stage"] == stage]
        for axis, metric in ((loss_axis, "loss"), (accuracy_axis, "accuracy")):
            for split, style in (("train", "--"), ("valid", "-")):
                axis.plot(rows_of["epoch"], rows_of[f"{split}_{metric}"], style,
                          color=f"C{index % 10}", label=f"{split} ({stage})")  # fmt: skip
    for axis in (loss_axis, accuracy_axis):
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    loss_axis.set(xlabel="epoch", ylabel="cross-entropy", title="loss")
    accuracy_axis.set(xlabel="epoch", ylabel="accuracy", title="accuracy", ylim=(0, 1))
    if stages:  # a job that stored no epoch has nothing to name
        figure.legend(handles, labels, loc="lower center", ncol=columns, frameon=False,
                      fontsize=LEGEND_FONTSIZE, bbox_to_anchor=(0.5, 0.02 / height))  # fmt: skip
    figure.suptitle(wrapped(title, 110))
    return figure


def learning_curve_overview(jobs: Sequence[tuple[str, pd.DataFrame]], title: str) -> Figure:
    """Every job's accuracy per epoch on one page, a small panel per job (train dashed, valid
    solid, a colour per fit stage), so a run of 26 methods can be checked at a glance instead of
    opening 26 files; the per-job figures keep the loss and the detail. ``jobs``: (panel title,
    curves) in the order to show; a job without curves (it trained no epoch on the final step)
    gets no panel, and a note under the legend names it.

    The margins are fixed in inches rather than left to constrained layout, whose cost grows
    with the panels (seconds per save for 26, and a protocol's views make hundreds)."""
    without = [name for name, curves in jobs if not len(curves)]
    jobs = [(name, curves) for name, curves in jobs if len(curves)]
    stages = list(dict.fromkeys(s for _, curves in jobs for s in curves["stage"]))
    colour = {stage: f"C{index % 10}" for index, stage in enumerate(stages)}
    handles, labels = _curve_legend(stages)
    columns = min(len(jobs), 6) or 1
    rows = -(-len(jobs) // columns) or 1
    # the legend's column: its longest entry (stage names run long: exponential_2e-4_0.5/final)
    # after a handle and the padding (3.6 em), measured as glyph outlines, not estimated
    font = FontProperties(size=LEGEND_FONTSIZE)
    text = max(TextPath((0, 0), label, prop=font).get_extents().width for label in labels)
    left, top, bottom = 0.6, 0.6, 0.5  # tick labels, title, axis label
    right = (text + 3.6 * LEGEND_FONTSIZE) / 72 + 0.15
    width, height = 2.15 * columns + left + right, 1.6 * rows + top + bottom
    figure = new_figure(width, height, layout=None)
    grid = figure.add_gridspec(
        rows, columns, left=left / width, right=1 - right / width, top=1 - top / height,
        bottom=bottom / height, wspace=0.1, hspace=0.42,
    )  # fmt: skip
    first = None
    for index, (name, curves) in enumerate(jobs):
        axis = figure.add_subplot(grid[index // columns, index % columns], sharey=first)
        first = first or axis
        for stage in dict.fromkeys(curves["stage"]):
            part = curves[curves["stage"] == stage]
            for split, style in (("train", "--"), ("valid", "-")):
                axis.plot(part["epoch"], part[f"{split}_accuracy"], style, color=colour[stage],
                          linewidth=1)  # fmt: skip
        axis.set_title(name, fontsize=8, pad=2)
        axis.set_ylim(0, 1)
        axis.xaxis.set_major_locator(MaxNLocator(integer=True, nbins=4))
        axis.tick_params(labelsize=6, pad=1)
        if index % columns:
            axis.tick_params(labelleft=False)
    figure.legend(handles, labels, loc="upper left", fontsize=LEGEND_FONTSIZE, frameon=False,
                  bbox_to_anchor=(1 - (right - 0.05) / width, 1 - top / height))  # fmt: skip
    if without:
        figure.text(1 - (right - 0.1) / width, bottom / height,
                    wrapped(f"no panel: {', '.join(without)} (no epoch trained on the final "
                             "step)", max(int(right * 14), 16)),
                    fontsize=LEGEND_FONTSIZE - 1, ha="left", va="bottom")  # fmt: skip
    figure.suptitle(wrapped(f"{title}: accuracy per epoch", int(width * 12)), fontsize=10,
                    y=1 - 0.12 / height, va="top")  # fmt: skip
    figure.supxlabel("epoch", fontsize=8, y=0.08 / height, va="bottom")
    figure.supylabel("accuracy", fontsize=8, x=0.08 / width, ha="left")
    return figure


# The paper's figures of finished jobs


def interpolation_panels(
    paths: dict[str, dict[str, pd.DataFrame]],
    title: str,
    left_out: Mapping[str, str] | None = None,
) -> Figure:
    """Paper Fig. 1: test accuracy along each method's path, one panel per architecture, the
    methods named once in a legend beside the panels (they look the same in every panel).
    ``left_out``: methods of the run without a path, each with why (scratch jobs start from
    nothing), said under the figure so the legend's gaps are explained."""
    figure, axes = _panels(len(paths), width=4.4, height=3.6, extra=1.6)
    for axis, (arch, methods) in zip(axes, paths.items(), strict=True):
        for method in _by_registry(list(methods)):
            path = methods[method]
            axis.plot(path["s"], path["test_accuracy"], **method_style(method).line(),
                      markevery=0.12, markersize=4.5, linewidth=1.3, label=method, gid=method)  # fmt: skip
        axis.set(title=arch, xlabel="s: 0 = the model it started from, 1 = its final model",
                 ylabel="test accuracy on the final step", xlim=(0, 1))  # fmt: skip
    # the panels' width, not the figure's: a title over the legend ran into it
    figure.suptitle(wrapped(title, int(4.4 * len(axes[:3]) * 10)), fontsize=9)
    method_legend(figure, [m for methods in paths.values() for m in methods])
    note = _left_out(left_out or {})
    if note:
        figure.supxlabel(_caption([note], figure.get_figwidth()), fontsize=7.5, x=0.01,
                         ha="left", multialignment="left")  # fmt: skip
    return figure


_REFERENCES = {"baseline": "ERM on the final step (baseline)", "erm": "ERM on all steps"}


_ADJ = r"$\lambda_{\mathrm{adj}}$"


def adjacency_sweep(trials: pd.DataFrame, references: Mapping[str, float], title: str) -> Figure:
    """Paper Fig. 9: the joint model's final-step validation accuracy against λ_adj, with the
    validation accuracy of the reference methods in ``references`` (method → value) as
    lines in their own colours. Where JM's tuning tried one λ_adj or none (a budget of one
    random draw), the figure says so in the axes: one point is no sweep, and a reader would
    otherwise look for the rest of the curve."""
    figure = new_figure(7.0, 3.6)
    axis = figure.add_subplot()
    jm = method_style("jm")
    for index, (state, rows) in enumerate(trials.groupby("state")):
        name = str(state).lower()
        axis.plot(rows["adjacency"], rows["valid_accuracy"], _MARKERS[index % len(_MARKERS)],
                  color=jm.colour, alpha=0.8,
                  label=f"JM tuning trial ({name})" if name != "pruned" else
                  "JM tuning trial (pruned: at its last epoch)")  # fmt: skip
    for method, value in references.items():
        axis.axhline(value, color=method_style(method).colour, linestyle="--", linewidth=1,
                     label=_REFERENCES.get(method, method))  # fmt: skip
    axis.set_xscale("log")
    # 1, 2 and 5 per decade, as plain numbers: matplotlib's default labels every minor tick of a
    # log axis spanning under a decade, in overlapping "2 × 10⁰ 3 × 10⁰" form
    axis.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axis.xaxis.set_minor_formatter(NullFormatter())
    tried = sorted({float(a) for a in trials["adjacency"] if a is not None and a > 0})
    if len(tried) == 1:  # centred in a decade either side, not at a log axis' edge
        axis.set_xlim(tried[0] / 10, tried[0] * 10)
    if len(tried) < 2:
        what = f"one value, {tried[0]:.3g}," if tried else "no value"
        axis.text(0.5, 0.5, f"JM's tuning tried {what} of {_ADJ}: no sweep to draw.\n"
                  "A budget that tries several (paper: 0.01, 0.1, 1) draws the curve.",
                  transform=axis.transAxes, ha="center", va="center", fontsize=8, color="0.3",
                  bbox={"facecolor": "white", "edgecolor": "0.8"})  # fmt: skip
    axis.set(xlabel=f"{_ADJ}: weight of the penalty on adjacent steps' weight change",
             ylabel="final-step validation accuracy")  # fmt: skip
    axis.set_title(wrapped(title, 75), fontsize=8)
    handles, labels = axis.get_legend_handles_labels()
    legend_outside(figure, handles, labels)
    return figure


def result_heatmap(
    means: pd.DataFrame, title: str, same_jobs: Mapping[tuple[str, str], str] | None = None
) -> Figure:
    """Test accuracy, methods (rows, the paper's order) × architectures; empty where missing,
    and where the architecture trains the method as another's job (``same_jobs``: (method,
    arch) → that method) the empty cell names it, with a caption saying why."""
    table = means.T
    same_jobs = same_jobs or {}
    figure = new_figure(max(3.5 + 0.9 * len(table.columns), 5.0), 1.2 + 0.32 * len(table.index))
    axis = figure.add_subplot()
    image = axis.imshow(table.to_numpy(dtype=float), cmap="viridis", aspect="auto")
    for (row, column), value in np.ndenumerate(table.to_numpy(dtype=float)):
        if not np.isnan(value):
            axis.text(column, row, f"{value:.2f}", ha="center", va="center", fontsize=7,
                      color="white" if value < np.nanmean(table.to_numpy(dtype=float)) else "black")  # fmt: skip
        elif (table.index[row], table.columns[column]) in same_jobs:
            other = same_jobs[(table.index[row], table.columns[column])]
            axis.text(column, row, f"= {other}", ha="center", va="center", fontsize=7,
                      color="#555555")  # fmt: skip
    if same_jobs:  # as the axis label, so the layout makes room for it below the ticks
        axis.set_xlabel(wrapped("“= m”: the architecture trains this method as m's job (its "
                                 "side module is a whole block), shown in m's row.", 60),
                        fontsize=6.5)  # fmt: skip
    axis.set_xticks(range(len(table.columns)), list(table.columns), rotation=30, fontsize=7)
    axis.set_yticks(range(len(table.index)), list(table.index), fontsize=7)
    figure.colorbar(image, ax=axis, label="test accuracy")
    axis.set_title(wrapped(title, 55), fontsize=8)
    return figure


def protocol_figure(rows: list[ProtocolScore], protocol: str, title: str) -> Figure:
    """One line per method over time, means over seeds: for ``eval_stream`` each time's window
    average with the band down to its worst step shaded; for ``test_then_train`` the accuracy on
    each step before training on it; for ``eval_fix`` and ``mixed_split`` the accuracy on each
    later step."""
    figure = new_figure(8.0, 4.2)
    axis = figure.add_subplot()
    methods = _by_registry([r.method for r in rows])
    for method in methods:
        mine = [r for r in rows if r.method == method]
        style = method_style(method)
        if protocol == "eval_stream":
            frame = pd.DataFrame([t for r in mine for t in r.numbers["per_time"]])
            means = frame.groupby("time")[["average", "worst"]].mean()
            x, y = means.index, means["average"]
            axis.fill_between(x, means["worst"], y, color=style.colour, alpha=0.12)
        else:
            column = "curve" if protocol == "test_then_train" else "ood_per_step"
            frame = pd.DataFrame([{"step": int(s), "accuracy": a} for r in mine
                                  for s, a in r.numbers[column].items()])  # fmt: skip
            means = frame.groupby("step")["accuracy"].mean()
            x, y = means.index, means
        axis.plot(x, y, **style.line(), markersize=4, linewidth=1.2, label=method, gid=method)
    axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    xlabel = {"eval_stream": "time t (model of steps 0..t)",
              "test_then_train": "step t (predicted by the model of steps 0..t-1)"}  # fmt: skip
    axis.set(xlabel=xlabel.get(protocol, "later step"), ylabel="accuracy")
    low, high = axis.get_ylim()  # the data's range: methods a few points apart stay apart
    axis.set_ylim(max(0.0, low - 0.02), min(1.0, high + 0.02))
    if protocol == "eval_stream":
        axis.set_title("window average (line) down to the window's worst step (band)", fontsize=8)
    figure.suptitle(wrapped(title), fontsize=10)
    method_legend(figure, methods)
    return figure


def forgetting_figure(rows: list[ProtocolScore], title: str) -> Figure:
    """Feature Forgetting's two curves over an Eval-Stream, one line per method, means over
    seeds: P_CL, the model of time t's mean accuracy on the steps 0..t it has seen, and
    P_forget (its Eq. 8), how far it has fallen on those steps below the best any time so far
    scored (docs/representations.md)."""
    figure = new_figure(9.0, 4.0)
    axes = figure.subplots(1, 2)
    methods = _by_registry([r.method for r in rows])
    for method in methods:
        frame = pd.DataFrame([t for r in rows if r.method == method for t in r.numbers["per_time"]])
        means = frame.groupby("time")[["p_cl", "p_forget"]].mean()
        for axis, column in zip(axes, ("p_cl", "p_forget"), strict=True):
            curve = means[column].dropna()
            axis.plot(curve.index, curve, **method_style(method).line(), markersize=4,
                      linewidth=1.2, label=method, gid=method)  # fmt: skip
    labels = ("P_CL: accuracy on steps 0..t", "P_forget: best earlier − now, steps before t")
    for axis, label, ylabel in zip(axes, labels, ("test accuracy", "accuracy lost"), strict=True):
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        axis.set(xlabel="time t (model of steps 0..t)", ylabel=ylabel)
        axis.set_title(label, fontsize=8)
    axes[1].axhline(0.0, color="grey", linewidth=0.8)
    figure.suptitle(wrapped(title), fontsize=10)
    method_legend(figure, methods)
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
    """Test accuracy against total training FLOPs (log scale), one point per method in its own
    look, named beside it where the name has room (points on one spot share a name), with the
    Pareto front (no other method both cheaper and more accurate) joined by a line and ringed
    (a front of one point shows too), as NED plots accuracy against compute. ``points``: method,
    train_flops, test_accuracy; ``accuracy`` and ``compute`` label the axes (a protocol's score,
    the FLOPs of all its views)."""
    figure = new_figure(8.2, 4.8)
    axis = figure.add_subplot()
    for row in points.itertuples():
        style = method_style(row.method)
        axis.plot(row.train_flops, row.test_accuracy, marker=style.marker, color=style.colour,
                  markersize=6, linestyle="", gid=row.method)  # fmt: skip
    ordered = points.sort_values(["train_flops", "test_accuracy"], ascending=[True, False])
    front, best = [], -np.inf
    for row in ordered.itertuples():
        if row.test_accuracy > best:
            front.append((row.train_flops, row.test_accuracy))
            best = row.test_accuracy
    extra = []
    if front:
        (line,) = axis.plot(*zip(*front, strict=True), "--o", color="grey", linewidth=1,
                            markersize=11, markerfacecolor="none", label="Pareto front")  # fmt: skip
        extra.append((line, "Pareto front"))
    axis.set(xscale="log", xlabel=compute, ylabel=accuracy)
    axis.margins(x=0.08, y=0.1)
    _label_flops(axis, points["train_flops"])
    # over the axes, not the figure: a figure title ran into the legend beside the axes
    axis.set_title(wrapped(title, 60), fontsize=10)
    method_legend(figure, [str(m) for m in points["method"]], extra)
    named = [(r.train_flops, r.test_accuracy, str(r.method)) for r in points.itertuples()]
    _place_labels([(axis, named)], lines={axis: front})
    return figure
