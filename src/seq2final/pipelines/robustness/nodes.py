"""Nodes that read a family's members together (docs/intensity.md)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace

import pandas as pd
from matplotlib.figure import Figure

from seq2final.config.checks import CheckedRun
from seq2final.core.errors import Seq2FinalError
from seq2final.data.family import Member, intensity_label
from seq2final.data.spec import SequenceSpec
from seq2final.pipelines.evaluate.nodes import sequence_records
from seq2final.reporting import plots
from seq2final.reporting.robustness import (
    accuracy_deltas,
    history_distances,
    history_value,
    robustness_slopes,
)
from seq2final.reporting.tables import report_folder, shown_name
from seq2final.training.records import ResultRecord

log = logging.getLogger(__name__)

Family = list[tuple[Member, SequenceSpec]]


def resolve_family(run: CheckedRun) -> Family:
    """Every member's full specification, in the family's order, as the check resolved it."""
    if not run.members:
        raise Seq2FinalError(
            f"the robustness pipeline reads a family, and sequence '{run.parameters.sequence}' "
            "is one sequence; valid: a spec with '@*' and intensities, e.g. "
            "--params 'sequence:source600:rotation@*/300,intensities:[0,15,30]'"
        )
    return list(run.members)


def gather_family(
    family: Family,
    results: Mapping[str, ResultRecord],
    distances: Mapping[str, pd.DataFrame],
    run: CheckedRun,
) -> pd.DataFrame:
    """One row per member, job and seed of the run's budget: the final step's test accuracy
    and the shift measures of the member drawn at that record's seed (each seed draws its own
    images, so its own distances). A member with no results, or a seed of it with no measured
    distances, is named in the log with the command that makes them."""
    budget = run.parameters.budget
    rows = []
    for member, spec in family:
        records = [r for r in sequence_records(spec, results) if r.budget == budget]
        if not records:
            log.warning(
                "family member '%s' has no results under budget %s: kedro run --params "
                "'sequence:%s,budget:%s' trains and measures it",
                member.sequence, budget, member.sequence, budget,
            )  # fmt: skip
        measured = {
            seed: history_distances(distances.get(replace(spec, seed=seed).key))
            for seed in sorted({r.seed for r in records})
        }
        for seed in [s for s, found in measured.items() if not found]:
            log.warning(
                "family member '%s' has no distances at seed %s: kedro run --pipelines "
                "build_sequences,quantify_shift --params 'sequence:%s,seed:%s' measures them",
                member.sequence, seed, member.sequence, seed,
            )  # fmt: skip
        for record in records:
            rows.append({"intensity": member.intensity, "sequence": member.sequence,
                         "method": shown_name(record), "arch": record.arch, "seed": record.seed,
                         "accuracy": record.test_accuracy, **measured[record.seed]})  # fmt: skip
    return pd.DataFrame(rows)


def fit_robustness(
    points: pd.DataFrame, family: Family, run: CheckedRun
) -> tuple[dict[str, pd.DataFrame], dict[str, str], dict[str, Figure]]:
    """The robustness slopes of every method and architecture on each shift measure, history's
    value at every intensity and the points behind them, as CSV and Markdown, and the figures:
    Δ-accuracies with their lines per architecture, slopes against clean accuracy, history's
    value."""
    sequence, options, budget = (
        run.parameters.sequence,
        run.parameters.robustness,
        run.parameters.budget,
    )
    dataset = family[0][1].dataset
    if points.empty:
        raise Seq2FinalError(
            f"no member of the family has results under budget {budget}; valid: train the "
            "members first (kedro run on the family trains them, then runs this pipeline)"
        )
    folder = report_folder(sequence, dataset)
    deltas = accuracy_deltas(points)
    slopes = robustness_slopes(deltas, options.measures)
    value = history_value(points, options.reference)
    title = f"{sequence} ({dataset}, {budget})"
    tables = {f"{folder}/{budget}-points": deltas, f"{folder}/{budget}-slopes": slopes,
              f"{folder}/{budget}-history": value}  # fmt: skip
    reports = {
        f"{folder}/{budget}-slopes": f"# Robustness slopes: {title}\n\n" + _slopes_markdown(slopes),
        f"{folder}/{budget}-history": f"# History's value against intensity: {title}\n\n"
        + _history_markdown(value, options.reference),
    }
    figures: dict[str, Figure] = {}
    if not slopes.empty:
        for arch in sorted(set(deltas["arch"])):
            figures[f"{folder}/{budget}-{arch}-deltas"] = plots.robustness_lines(
                deltas, slopes, arch, f"Δ-accuracy: {title}", intensity_label(sequence)
            )
        for measure in sorted(set(slopes["measure"])):
            figures[f"{folder}/{budget}-slope_vs_clean-{measure}"] = plots.slope_against_clean(
                slopes, measure, f"Robustness slope against clean accuracy: {title}"
            )
    if not value.empty:
        figures[f"{folder}/{budget}-history"] = plots.history_value_lines(
            value, options.reference, f"History's value: {title}", intensity_label(sequence)
        )
    return tables, reports, figures


def _slopes_markdown(slopes: pd.DataFrame) -> str:
    """One row per method, architecture and measure: slope [95 % interval], R², clean accuracy."""
    lines = ["| method | arch | measure | slope [95 % interval] | R² | clean accuracy | points |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    for _, row in slopes.iterrows():
        interval = (f" [{_num(row['low'])}, {_num(row['high'])}]"
                    if pd.notna(row["low"]) else "")  # fmt: skip
        lines.append(
            f"| {row['method']} | {row['arch']} | {row['measure']} | "
            f"{_num(row['slope'])}{interval} | {_num(row['r2'])} | "
            f"{_num(row['clean_accuracy'])} | {int(row['points'])} |"
        )
    return "\n".join(lines) + "\n"


def _history_markdown(value: pd.DataFrame, reference: str) -> str:
    """Methods down, intensities across: the mean gain over ``reference`` per architecture."""
    if value.empty:
        return f"No method was paired with {reference} on the same architecture and seed.\n"
    intensities = sorted(set(value["intensity"]))
    lines = ["| method | arch | " + " | ".join(f"{i:g}" for i in intensities) + " |",
             "|---|---|" + "---|" * len(intensities)]  # fmt: skip
    for (method, arch), cell in value.groupby(["method", "arch"], sort=True):
        gains = dict(zip(cell["intensity"], cell["gain"], strict=True))
        shown = [_num(gains[i]) if i in gains else "–" for i in intensities]
        lines.append(f"| {method} | {arch} | " + " | ".join(shown) + " |")
    return (
        f"Final-step test accuracy minus {reference}'s, mean over seeds.\n\n"
        + "\n".join(lines)
        + "\n"
    )


def _num(value: float) -> str:
    """Three significant digits (slopes per degree are small), "–" where there is none."""
    return "–" if pd.isna(value) else f"{value:.3g}"
