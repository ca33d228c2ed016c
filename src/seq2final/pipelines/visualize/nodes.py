"""Nodes that draw a sequence's finished jobs: paths, projections, SVCCA, λ_adj, heat-map, curves.

Every figure is made per budget and architecture (and seed) from the result records ``evaluate``
gathers, so any mix of runs is drawn and nothing is retrained. Interpolation paths cost a forward
pass over the test set per point; they are stored per job and reused.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Any

import pandas as pd
import plotly.graph_objects as go
from matplotlib.figure import Figure
from plotly.subplots import make_subplots

from seq2final.config.checks import CheckedRun
from seq2final.config.parameters import VisualizeOptions
from seq2final.data.spec import SequenceSpec
from seq2final.methods import METHODS, ORACLE, HistoricalState, paper_columns
from seq2final.methods.requests import canonical_modes
from seq2final.models import ARCHITECTURES, JointModel
from seq2final.pipelines.visualize.finished_jobs import JobModels
from seq2final.protocols import PROTOCOLS
from seq2final.reporting import plots
from seq2final.reporting.interpolation import interpolation_path, path_ends, path_key
from seq2final.reporting.projection import weight_projection
from seq2final.reporting.protocols import protocol_scores
from seq2final.reporting.svcca import svcca_similarity
from seq2final.reporting.tables import (
    ResultTable,
    cells,
    report_folder,
    shown_name,
    total_train_flops,
)
from seq2final.representations.figures import p_rep_by_history, representation_curves
from seq2final.representations.fit import SCRATCH
from seq2final.representations.tables import curve_table, p_rep_table, sequence_curves
from seq2final.training.records import ResultRecord

log = logging.getLogger(__name__)

Group = tuple[str, str, int]  # (budget, arch, seed)


def _folder(spec: SequenceSpec) -> str:
    return report_folder(spec.name, spec.dataset)


def _groups(records: list[ResultRecord]) -> dict[Group, dict[str, ResultRecord]]:
    """Records by (budget, arch, seed), each keyed by the name the tables show it under."""
    groups: dict[Group, dict[str, ResultRecord]] = defaultdict(dict)
    for record in records:
        if record.view is not None:  # a temporal protocol's view: drawn by plot_protocol
            continue
        groups[(record.budget, record.arch, record.seed)][shown_name(record)] = record
    return dict(sorted(groups.items()))


def interpolation_recipes(
    records: list[ResultRecord],
    results: Any,
    states: Mapping[str, HistoricalState],
    sequences: Any,
    options: VisualizeOptions,
) -> dict[str, Callable[[], pd.DataFrame | None]]:
    """One path per job that has one (see :mod:`seq2final.reporting.interpolation`), computed only if missing."""
    models = JobModels(results, states, sequences)
    points = options.interpolation_points
    recipes: dict[str, Callable[[], pd.DataFrame | None]] = {}
    for record in records:
        if record.view is not None:  # a temporal protocol's view: no path of the paper's figures
            continue

        def make(record: ResultRecord = record) -> pd.DataFrame | None:
            data = models.test_data(record)
            if data is None or models.missing_state(record):
                return None  # not stored: drawn once the sequence or state is back
            ends = path_ends(record, models.final(record), models.state(record))
            if ends is None:  # a scratch job: stored as an empty path
                return pd.DataFrame(columns=["s", "test_accuracy"])
            engine = record.engine
            device = engine.torch_device()
            ends.start, ends.end = ends.start.to(device), ends.end.to(device)
            log.info("interpolation path of %s (%d points)", record.job_key, points)
            return interpolation_path(ends, data, engine, points)

        recipes[path_key(record, points)] = make
    return recipes


def plot_interpolation(
    records: list[ResultRecord],
    paths: Mapping[str, pd.DataFrame],
    spec: SequenceSpec,
    options: VisualizeOptions,
    budget: str,
) -> tuple[dict[str, Figure], go.Figure]:
    """Paper Fig. 1 per budget and seed (one panel per architecture), as PNG, PDF and plotly."""
    points = options.interpolation_points
    by_figure: dict[tuple[str, int], dict[str, dict[str, pd.DataFrame]]] = defaultdict(dict)
    pathless: dict[tuple[str, int], dict[str, str]] = defaultdict(dict)
    for (run_budget, arch, seed), group in _groups(records).items():
        drawn = {}
        for name, record in group.items():
            key = path_key(record, points)
            path = paths.get(key)
            if path is not None and len(path):  # scratch jobs store an empty path
                drawn[name] = path
            else:
                pathless[(run_budget, seed)][name] = (
                    "trained from scratch: no start model, no path" if path is not None
                    else "no stored path"
                )  # fmt: skip
        if drawn:
            by_figure[(run_budget, seed)][arch] = drawn
    figures = {
        f"{_folder(spec)}/{b}-seed{seed}-interpolation": plots.interpolation_panels(
            panels,
            f"{spec.name} ({spec.dataset}), budget {b}, seed {seed}: test accuracy along the "
            "straight path from each method's start model to its final model",
            {
                n: why
                for n, why in pathless[(b, seed)].items()
                if not any(n in methods for methods in panels.values())
            },
        )  # fmt: skip
        for (b, seed), panels in by_figure.items()
    }
    shown = next((key for key in by_figure if key[0] == budget), next(iter(by_figure), None))
    return (
        figures,
        _interpolation_plotly(by_figure.get(shown, {}) if shown else {}, spec),
    )


def _interpolation_plotly(
    panels: dict[str, dict[str, pd.DataFrame]], spec: SequenceSpec
) -> go.Figure:
    figure = make_subplots(rows=1, cols=max(len(panels), 1), subplot_titles=list(panels) or None)
    for column, methods in enumerate(panels.values(), start=1):
        for method, path in methods.items():
            figure.add_trace(
                go.Scatter(x=path["s"], y=path["test_accuracy"], name=method, legendgroup=method,
                           showlegend=column == 1, mode="lines"),
                row=1, col=column,
            )  # fmt: skip
    figure.update_layout(title=f"{spec.name}: test accuracy along interpolation paths")
    figure.update_xaxes(title_text="s")
    figure.update_yaxes(title_text="test accuracy")
    return figure


# why the projection leaves a method out, said under the figure
_PER_STEP = (
    "joint and side-tuned models hold a module per step: weights of another shape than the oracle's"
)


def plot_projections(
    records: list[ResultRecord],
    results: Any,
    states: Mapping[str, HistoricalState],
    spec: SequenceSpec,
) -> tuple[dict[str, Figure], dict[str, pd.DataFrame]]:
    """Appendix G.2's weight projection for every (budget, arch, seed) with its three anchors.

    The anchors are the oracle, the baseline and ERM on the historical steps (the state FT
    starts from); a group missing one is skipped with a note. Models with a module per step
    (joint and side-tuned) have other weight shapes and are left out, the figure says so: the
    paper leaves side modules out for this reason but draws its joint model (docs/fixes.md).
    """
    models = JobModels(results, states, None)
    figures, frames = {}, []
    for (budget, arch, seed), group in _groups(records).items():
        history = next((r for r in group.values() if r.historical == "erm"), None)
        erm_state = models.state(history) if history is not None else None
        if ORACLE not in group or "baseline" not in group or erm_state is None:
            log.info("no weight projection for %s/%s/seed %s: it needs the oracle, the "
                     "baseline and a stored ERM-history state (FT's)", budget, arch, seed)  # fmt: skip
            continue
        erm_history = erm_state.chains["main"].last
        per_step = {n for n, r in group.items() if isinstance(models.final(r), JointModel)}
        trajectories = {
            name: [m for m, _ in models.trajectory(r)]
            for name, r in group.items()
            if name != ORACLE and name not in per_step
        }
        drawn = {n: t for n, t in trajectories.items() if t}
        left_out = {
            name: _PER_STEP if name in per_step else "no stored model"
            for name in group
            if name != ORACLE and name not in drawn
        }
        frame = weight_projection(
            drawn,
            models.final(group[ORACLE]),
            erm_history,
            models.final(group["baseline"]),
        )
        frames.append(frame.assign(budget=budget, arch=arch, seed=seed))
        figure = plots.projection_panels(
            frame,
            f"{spec.name} ({spec.dataset}), {arch}, budget {budget}, seed {seed}: each model's "
            "weights around the oracle's",
            left_out,
        )
        if figure is not None:  # no layer with a point: no figure of empty panels
            figures[f"{_folder(spec)}/{budget}-{arch}-seed{seed}-projection"] = figure
    return figures, {_folder(spec): _concat(frames)}


def plot_svcca(
    records: list[ResultRecord],
    results: Any,
    states: Mapping[str, HistoricalState],
    sequences: Any,
    spec: SequenceSpec,
    options: VisualizeOptions,
) -> tuple[dict[str, Figure], dict[str, pd.DataFrame]]:
    """Paper Fig. 17: every job's trajectory in SVCCA similarity to the oracle, per layer."""
    models = JobModels(results, states, sequences)
    figures, frames = {}, []
    for (budget, arch, seed), group in _groups(records).items():
        if ORACLE not in group:
            log.info("no SVCCA for %s/%s/seed %s: it needs the oracle", budget, arch, seed)
            continue
        data = models.test_data(group[ORACLE], options.svcca_images)
        if data is None:
            continue
        trajectories = {n: models.trajectory(r) for n, r in group.items() if n != ORACLE}
        frame = svcca_similarity(
            trajectories, models.final(group[ORACLE]), data, group[ORACLE].engine
        )
        frames.append(frame.assign(budget=budget, arch=arch, seed=seed))
        shown = set(frame["label"]) if not frame.empty else set()
        figure = plots.svcca_panels(
            frame,
            f"{spec.name} ({spec.dataset}), {arch}, budget {budget}, seed {seed}: how alike "
            "each model's representation is to the oracle's (SVCCA)",
            {n: "no stored model" for n in trajectories if n not in shown},
        )
        if figure is not None:
            figures[f"{_folder(spec)}/{budget}-{arch}-seed{seed}-svcca"] = figure
    return figures, {_folder(spec): _concat(frames)}


def plot_adjacency_sweep(records: list[ResultRecord], spec: SequenceSpec) -> dict[str, Figure]:
    """Paper Fig. 9 from JM's own trials: validation accuracy per λ_adj tried, against the
    validation accuracy of ERM on the final step alone (baseline) and on all steps (ERM)."""
    figures = {}
    for (budget, arch, seed), group in _groups(records).items():
        if "jm" not in group:
            continue
        trials = pd.DataFrame(
            [
                {"adjacency": t.params.get("adjacency"), "valid_accuracy": t.reached,
                 "state": t.state}
                for fit in group["jm"].fits
                for t in fit.trial_summaries
                if t.reached is not None and t.params.get("adjacency") is not None
            ],
            columns=["adjacency", "valid_accuracy", "state"],
        )  # fmt: skip
        references: dict[str, float] = {
            name: group[name].valid_accuracy for name in ("baseline", "erm") if name in group
        }
        figures[f"{_folder(spec)}/{budget}-{arch}-seed{seed}-adjacency"] = plots.adjacency_sweep(
            trials,
            references,
            f"{spec.name} ({spec.dataset}), {arch}, budget {budget}, seed {seed}: JM's accuracy "
            "for each adjacency weight its tuning tried",
        )
    return figures


def plot_heatmaps(
    records: list[ResultRecord], spec: SequenceSpec, budget: str
) -> tuple[dict[str, Figure], go.Figure]:
    """Test accuracy, methods × architectures, one heat-map per budget (plotly: the run's); none
    for a temporal protocol's views, whose numbers are its own (``plot_protocol``)."""
    figures, tables = {}, {}
    records = [r for r in records if r.view is None]
    if not records:
        return {}, go.Figure()
    for run_budget in sorted({r.budget for r in records}):
        table = ResultTable.from_cells(cells([r for r in records if r.budget == run_budget]))
        tables[run_budget] = table.means
        figures[f"{_folder(spec)}/{run_budget}-heatmap"] = plots.result_heatmap(
            table.means,
            f"{spec.name} ({spec.dataset}), budget {run_budget}: test accuracy",
            _same_jobs(table.means),
        )
    means = tables.get(budget, next(iter(tables.values())))
    interactive = go.Figure(
        go.Heatmap(z=means.T.to_numpy(), x=list(means.index), y=list(means.columns),
                   colorscale="Viridis", colorbar={"title": "test accuracy"})
    )  # fmt: skip
    interactive.update_layout(title=f"{spec.name}: test accuracy", yaxis={"autorange": "reversed"})
    return figures, interactive


def _same_jobs(means: pd.DataFrame) -> dict[tuple[str, str], str]:
    """(method, arch) of each empty cell of an architectures × methods table whose method that
    architecture trains as another's job, to that method: on a ConvNet, whose block is one conv
    and BN, ``st_b`` trains ``st_1``'s model (``canonical_modes``), so its cell says so."""

    def modes(method: str, arch: str) -> tuple[str, str] | None:
        recipe = METHODS.get(method)
        if recipe is None or arch not in ARCHITECTURES:
            return None
        return canonical_modes(recipe.historical, recipe.final, arch)

    same = {}
    for arch in means.index:
        shown = [m for m in means.columns if pd.notna(means.at[arch, m])]
        for method in (m for m in means.columns if pd.isna(means.at[arch, m])):
            mine = modes(method, arch)
            other = next((m for m in shown if mine and modes(m, arch) == mine), None)
            if other is not None:
                same[(method, arch)] = other
    return same


def plot_learning_curves(
    records: list[ResultRecord], results: Any, spec: SequenceSpec
) -> dict[str, Figure]:
    """Each job's per-epoch loss and accuracy (every fit stage), as stored when it trained, and
    per budget, architecture and seed an overview with a small panel per job
    (``curves/overview-<budget>-<arch>-seed<seed>``; a temporal protocol's views in
    ``…-views``), so a run of 26 methods reads on one page."""
    figures = {}
    overviews: dict[tuple[str, str, int, bool], list[tuple[str, pd.DataFrame]]] = defaultdict(list)
    for record in records:
        name = shown_name(record)
        view = f"-steps{record.view.name}" if record.view is not None else ""
        group = f"{record.budget}-{record.arch}-seed{record.seed}"
        curves = results.learning_curves(record.job_key)
        panel = f"{name} · steps {record.view.name}" if record.view is not None else name
        overviews[(record.budget, record.arch, record.seed, bool(view))].append((panel, curves))
        if curves.empty:  # trained no epoch on the final step (NCM, as_is): the overview says so
            continue
        figures[f"{_folder(spec)}/curves/{group}-{name}{view}"] = plots.learning_curves(
            curves,
            f"{name} on {spec.name} ({spec.dataset}){view.replace('-steps', ', steps ')}, "
            f"{record.arch}, budget {record.budget}, seed {record.seed}: loss and accuracy per "
            "epoch on the final step",
            record.stage_labels(),
        )
    order = {name: index for index, name in enumerate(paper_columns())}
    for (budget, arch, seed, views), jobs in overviews.items():
        jobs.sort(key=lambda job: (order.get(job[0].split(" ")[0], len(order)), job[0]))
        suffix = "-views" if views else ""
        figures[f"{_folder(spec)}/curves/overview-{budget}-{arch}-seed{seed}{suffix}"] = (
            plots.learning_curve_overview(
                jobs, f"{spec.name} ({spec.dataset}), {arch}, budget {budget}, seed {seed}"
            )
        )
    return figures


def plot_compute(records: list[ResultRecord], spec: SequenceSpec) -> dict[str, Figure]:
    """Per budget and architecture, every method's test accuracy against its training FLOPs
    (historical state included), means over seeds: the accuracy-for-compute Pareto figure."""
    counted = [r for r in records if r.train_flops is not None and r.view is None]
    rows = [{"budget": r.budget, "arch": r.arch, "method": shown_name(r),
             "train_flops": total_train_flops(r), "test_accuracy": r.test_accuracy}
            for r in counted]  # fmt: skip
    figures = {}
    frame = pd.DataFrame(rows)
    for (budget, arch), group in frame.groupby(["budget", "arch"]) if rows else []:
        points = group.groupby("method", as_index=False)[["train_flops", "test_accuracy"]].mean()
        title = f"{spec.name} ({spec.dataset}), {arch}, budget {budget}: accuracy for compute"
        figures[f"{_folder(spec)}/{budget}-{arch}-compute"] = plots.compute_pareto(points, title)
    return figures


def plot_protocol(
    records: list[ResultRecord], spec: SequenceSpec, run: CheckedRun
) -> dict[str, Figure]:
    """Under a temporal protocol, per budget and architecture: every method's accuracy over
    time (the stream figure; under ``eval_stream`` also its P_CL and P_forget over time), and
    its headline score against the training FLOPs of every view
    it trained (the protocol's accuracy-for-compute Pareto figure); nothing under ``final``."""
    protocol = run.parameters.protocol
    if not PROTOCOLS[protocol].temporal:
        return {}
    rows = protocol_scores(records, protocol, run.protocol_options)
    figures = {}
    for budget, arch in sorted({(r.budget, r.arch) for r in rows}):
        mine = [r for r in rows if (r.budget, r.arch) == (budget, arch)]
        title = f"{spec.name} ({spec.dataset}), {arch}, budget {budget}: {protocol}"
        figures[f"{_folder(spec)}/{protocol}/{budget}-{arch}"] = plots.protocol_figure(
            mine, protocol, title
        )
        if protocol == "eval_stream":
            figures[f"{_folder(spec)}/{protocol}/{budget}-{arch}-forgetting"] = (
                plots.forgetting_figure(mine, f"{title}: what each time keeps of the steps seen")
            )
        score = PROTOCOLS[protocol].headline_report
        points = (
            pd.DataFrame([r.flat() for r in mine])
            .groupby("method", as_index=False)[["train_flops", score]]
            .mean()
            .rename(columns={score: "test_accuracy"})
        )
        figures[f"{_folder(spec)}/{protocol}/{budget}-{arch}-compute"] = plots.compute_pareto(
            points, f"{title}: {score} for compute", f"{protocol} {score}",
            "training FLOPs of every view (historical states included, every trial)",
        )  # fmt: skip
    return figures


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def plot_representation_curves(
    curves: Mapping[str, pd.DataFrame], spec: SequenceSpec
) -> dict[str, Figure]:
    """Per budget, architecture and tested view, the data-efficiency curves of the sequence's
    historical states, each mode's longest history (docs/representations.md); where a mode has
    states of several histories (``test_on: sequence``), also P_rep against the number of
    steps. None where no curve was fitted."""
    points = sequence_curves(spec, curves)
    figures = {}
    groups = points.groupby(["budget", "arch", "view"]) if not points.empty else []
    for (budget, arch, view), points_of in groups:
        where = f", steps {view}" if view else ""
        head = f"{spec.name} ({spec.dataset}), {arch}{where}, budget {budget}"
        name = f"{_folder(spec)}/{budget}-{arch}{'-' + view if view else ''}"
        longest = points_of.groupby("state")["history"].transform("max")
        figures[f"{name}-curves"] = representation_curves(
            curve_table(points_of[points_of["history"] == longest]),
            f"{head}: final-step accuracy by training size",
            SCRATCH,
        )
        if (points_of.groupby("state")["history"].nunique() > 1).any():
            figures[f"{name}-p_rep-history"] = p_rep_by_history(
                p_rep_table(points_of), f"{head}: P_rep by the steps a state saw", SCRATCH
            )
    return figures
