"""Nodes that gather a sequence's result records and write the paper's tables."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from seq2final.config.checks import CheckedRun
from seq2final.config.parameters import EvaluateOptions
from seq2final.core.errors import Seq2FinalError
from seq2final.data.spec import SequenceSpec
from seq2final.methods import ORACLE, paper_columns
from seq2final.protocols import PROTOCOLS
from seq2final.reporting.comparisons import paired_comparison
from seq2final.reporting.protocols import protocol_scores, protocol_tables
from seq2final.reporting.shift import relative_to_final
from seq2final.reporting.tables import (
    ResultTable,
    arch_sort_key,
    cells,
    format_number,
    render,
    report_folder,
    shown_name,
    table2_styles,
    to_csv_frame,
    total_train_flops,
)
from seq2final.representations.tables import curve_table, p_rep_table, sequence_curves
from seq2final.runs.result_store import ResultStore
from seq2final.training.records import ResultRecord

log = logging.getLogger(__name__)

_SUMMARY_METRICS = ("test_accuracy", "worst_class_accuracy", "ece")


def gather_results(spec: SequenceSpec, results: Mapping[str, ResultRecord]) -> list[ResultRecord]:
    """:func:`sequence_records`, refusing a sequence with none with the command that makes
    them."""
    records = sequence_records(spec, results)
    if not records:
        raise Seq2FinalError(
            f"no results for sequence '{spec.name}' ({spec.dataset}); make them with: kedro run "
            f"--params sequence:{spec.name},dataset:{spec.dataset}"
            + (f",data_path:{spec.data_path}" if spec.data_path else "")
        )
    log.info("evaluating %d result(s) of sequence %s (%s)", len(records), spec.name, spec.dataset)
    return records


def sequence_records(spec: SequenceSpec, results: Mapping[str, ResultRecord]) -> list[ResultRecord]:
    """Every readable result record of the sequence, any architecture, method, seed or budget.

    Records are matched by sequence name and dataset; each must come from this specification at
    its own seed, so results of, say, another test size under the same name are refused rather
    than averaged in. So are two records of one method, architecture, budget and seed: they
    differ in settings, and averaging them would pass two experiments off as two seeds. A
    record that cannot be read is reported with its path, skipped and not counted.
    """
    records = []
    cells_seen: dict[tuple[Any, ...], str] = {}
    for key in results:
        try:
            record = results[key]
            ours = (record.sequence, record.dataset) == (spec.name, spec.dataset)
            expected = dataclasses.replace(spec, seed=record.seed).key if ours else None
            cell: tuple[Any, ...] = (record.budget, record.arch, record.method, record.seed)
        except Seq2FinalError as error:  # unreadable, or not a record
            where = results.record_path(key) if isinstance(results, ResultStore) else key
            log.warning(
                "result record %s cannot be read (%s: %s); it is not counted: rerun its job or "
                "delete the file", where, type(error).__name__, error,
            )  # fmt: skip
            continue
        if not ours or (record.view is not None) != spec.step_tests:
            continue  # another protocol's results (built with or without step tests)
        cell = (*cell, record.view.name) if record.view is not None else cell
        if record.sequence_key != expected:
            raise Seq2FinalError(
                f"result {key} is for sequence '{record.sequence_key}', not '{expected}': "
                f"the records named '{spec.name}' ({spec.dataset}) come from different "
                "specifications (another test size, data_path or data_options); pass the "
                "sequence's exact settings, or move the other records out of the results folder"
            )
        if cell in cells_seen:  # two settings under one budget name would pass as two seeds
            raise Seq2FinalError(
                f"results {cells_seen[cell]} and {key} are both {record.method} on "
                f"{record.arch} with budget {record.budget} and seed {record.seed}, but "
                "were run with different settings; give one setting its own budget name "
                "(`budgets:` in parameters.yml) or move one record out of the results folder"
            )
        cells_seen[cell] = key
        records.append(record)
    return records


def tabulate_results(
    records: list[ResultRecord], spec: SequenceSpec, options: EvaluateOptions, run: CheckedRun
) -> tuple[dict[str, pd.DataFrame], dict[str, str], dict[str, str]]:
    """Per budget: Tables 8–13 (per architecture), the Table 2 summary and the paired
    comparisons, as CSV and Markdown (the tables also as LaTeX); under a temporal protocol (the
    checked run's, with the options its check completed), its numbers as tables of the same
    layout instead.

    Budgets are never mixed in one table: a ``quick`` and a ``default`` result are different
    experiments.
    """
    folder = report_folder(spec.name, spec.dataset)
    protocol = run.parameters.protocol
    if PROTOCOLS[protocol].temporal:
        rows = protocol_scores(records, protocol, run.protocol_options)
        return protocol_tables(rows, protocol, f"{spec.name} ({spec.dataset})", folder)
    csv: dict[str, pd.DataFrame] = {}
    markdown: dict[str, str] = {}
    latex: dict[str, str] = {}
    for budget in sorted({r.budget for r in records}):
        group = [r for r in records if r.budget == budget]
        table = ResultTable.from_cells(cells(group))
        name = f"{folder}/{budget}-per_arch"
        csv[name] = to_csv_frame(table)
        markdown[name] = _title(spec, budget, "test accuracy per architecture") + render(
            table, "markdown"
        )
        latex[name] = render(table, "latex")
        summary = summarize(group)
        csv[f"{folder}/{budget}-summary"] = summary
        markdown[f"{folder}/{budget}-summary"] = _title(
            spec, budget, "mean over architectures"
        ) + summary_markdown(summary)
        comparisons = compare_methods(group, list(table.means.columns), options)
        csv[f"{folder}/{budget}-comparisons"] = comparisons
        markdown[f"{folder}/{budget}-comparisons"] = _title(
            spec, budget, "paired differences over architectures and seeds"
        ) + comparisons_markdown(comparisons)
    return csv, markdown, latex


def compare_methods(
    records: list[ResultRecord], methods: list[str], options: EvaluateOptions
) -> pd.DataFrame:
    """Every method of ``methods`` (the table's columns) against ``options.reference``, then
    the extra ``pairs``, for test accuracy.

    Pairs without a shared (arch, seed) are listed with 0 pairs and missing numbers, so a
    comparison asked for is never silently dropped.
    """
    reference = options.reference
    pairs = [(m, reference) for m in methods if m != reference]
    pairs += [(m, r) for m, r in options.pairs if (m, r) not in pairs]
    rows = [
        paired_comparison(
            records, method, ref, resamples=options.resamples,
            confidence=options.confidence,
        )
        for method, ref in pairs
    ]  # fmt: skip
    columns = ["method", "reference", "metric", "pairs", "mean_difference", "ci_low", "ci_high",
               "confidence"]  # fmt: skip
    return pd.DataFrame(rows, columns=columns)


def comparisons_markdown(comparisons: pd.DataFrame) -> str:
    lines = ["| method | reference | pairs | mean difference | interval |", "|---|---|---|---|---|"]
    for row in comparisons.itertuples():
        interval = (
            "–" if np.isnan(row.ci_low)
            else f"[{row.ci_low:+.3f}, {row.ci_high:+.3f}] ({row.confidence:.0%})"
        )  # fmt: skip
        difference = "–" if np.isnan(row.mean_difference) else f"{row.mean_difference:+.3f}"
        lines.append(
            f"| {row.method} | {row.reference} | {row.pairs} | {difference} | {interval} |"
        )
    return "\n".join(lines) + "\n"


def summarize(records: list[ResultRecord]) -> pd.DataFrame:
    """Table 2 style: per method the mean over architectures of test accuracy and extra metrics.

    Each architecture's value is first averaged over seeds, so an architecture run with more
    seeds does not weigh more. Test accuracy carries the main text's bold/italic rule.
    """
    columns = {}
    for metric in _SUMMARY_METRICS:
        per_arch = cells(records, metric)
        columns[metric] = per_arch.groupby("method")["mean"].mean()
        if metric == "test_accuracy":
            columns["architectures"] = per_arch.groupby("method")["arch"].nunique()
    # accuracy against compute, as NED reports it: a method's whole training, its historical
    # state's included (charged to every method that continues it: what reproducing it costs)
    counted = [r for r in records if r.train_flops is not None]
    if counted:
        columns["train_gflops"] = (
            cells(counted, total_train_flops).groupby("method")["mean"].mean() / 1e9
        )
        per_image = cells(counted, "inference_flops_per_image").groupby("method")["mean"].mean()
        columns["inference_mflops_per_image"] = per_image / 1e6
    # NED's minimum-distance detection of the final step in the historical model's features: a
    # model-based shift score, for the methods that continue such a model
    detected = [r for r in records if r.detection_auroc is not None]
    if detected:
        columns["detection_auroc"] = (
            cells(detected, "detection_auroc").groupby("method")["mean"].mean()
        )
    summary = pd.DataFrame(columns)
    order = ResultTable.from_cells(cells(records)).means.columns
    summary = summary.reindex(order)
    summary["style"] = table2_styles(summary["test_accuracy"])
    return summary.rename_axis("method").reset_index()


def summary_markdown(summary: pd.DataFrame) -> str:
    wrap = {"": "{}", "bold": "**{}**", "italic": "*{}*", "bold_italic": "***{}***"}
    compute = "train_gflops" in summary
    detection = "detection_auroc" in summary
    extra = " training GFLOPs | inference MFLOPs/image |" if compute else ""
    extra += " detection AUROC (history → final) |" if detection else ""
    lines = [
        "| method | test accuracy | worst-class accuracy | ECE | architectures |" + extra,
        "|---|---|---|---|---|" + ("---|---|" if compute else "") + ("---|" if detection else ""),
    ]
    for row in summary.itertuples():
        more = (
            f" {row.train_gflops:,.1f} | {row.inference_mflops_per_image:,.1f} |" if compute else ""
        )
        if detection:
            auroc = row.detection_auroc
            more += " – |" if pd.isna(auroc) else f" {auroc:.3f} |"
        lines.append(
            f"| {row.method} | {wrap[row.style or ''].format(format_number(row.test_accuracy))} "
            f"| {format_number(row.worst_class_accuracy)} | {format_number(row.ece)} "
            f"| {row.architectures} |{more}"
        )
    return "\n".join(lines) + "\n"


def _title(spec: SequenceSpec, budget: str, what: str) -> str:
    return f"# {spec.name} ({spec.dataset}), budget {budget}: {what}\n\n"


def choose_best_models(records: list[ResultRecord], spec: SequenceSpec) -> dict[str, pd.DataFrame]:
    """Per architecture, the adapted job with the best final-step *validation* accuracy.

    Any budget and seed of the sequence competes; the oracle does not (it is trained on the large
    final-step set, not adapted). Ties go to the paper's column order, then the earlier seed.
    The choice never looks at test accuracy, so reporting it stays honest.
    """
    order = {name: index for index, name in enumerate(paper_columns())}
    rows = []
    for arch in sorted({r.arch for r in records}, key=arch_sort_key):
        # a temporal protocol's views are not adapted final models: they do not compete
        candidates = [
            r for r in records
            if r.arch == arch and shown_name(r) != ORACLE and r.view is None
        ]  # fmt: skip
        if not candidates:
            continue
        best = max(
            candidates,
            key=lambda r: (r.valid_accuracy, -order.get(shown_name(r), len(order)), -r.seed),
        )
        rows.append(
            {"arch": arch, "method": shown_name(best), "job_method": best.method,
             "job_key": best.job_key,
             "budget": best.budget, "seed": best.seed,
             "valid_accuracy": best.valid_accuracy, "test_accuracy": best.test_accuracy}
        )  # fmt: skip
    folder = report_folder(spec.name, spec.dataset)
    return {folder: pd.DataFrame(rows)}


def tabulate_representation_curves(
    curves: Mapping[str, pd.DataFrame], spec: SequenceSpec
) -> tuple[dict[str, pd.DataFrame], dict[str, str]]:
    """The data-efficiency curves of the sequence's historical states (docs/representations.md),
    per budget: P_rep per state and kind, and every curve's points, means over seeds (CSV and
    Markdown); nothing where no curve was fitted (``kedro run --pipeline representations``)."""
    points = sequence_curves(spec, curves)
    tables, reports = {}, {}
    folder = report_folder(spec.name, spec.dataset)
    for budget, of_budget in points.groupby("budget", sort=False) if not points.empty else []:
        whole = (of_budget["view"] == "").all()  # no protocol view: no view column
        dropped = ["budget", "view"] if whole else ["budget"]
        p_rep, table = (t.drop(columns=dropped)
                        for t in (p_rep_table(of_budget), curve_table(of_budget)))  # fmt: skip
        reports[f"{folder}/{budget}-representations"] = "\n".join([
            f"# Data-efficiency curves of `{spec.name}` ({spec.dataset}), budget {budget}",
            "",
            "P_rep (Feature Forgetting): each historical state fine-tuned (FT) or probed (LP) on "
            "nested subsets of the final step's training set, tested on its test set; the mean "
            "over the sizes, then over seeds. `scratch`: a fresh model, no history.",
            "",
            p_rep.to_markdown(index=False, floatfmt=".3f"),
            "",
            *_by_history(p_rep),
            "Every point (test accuracy, mean over seeds; training FLOPs of one fit).",
            "",
            table.to_markdown(index=False, floatfmt=".3f"),
            "",
        ])  # fmt: skip
        tables[f"{folder}/{budget}-p_rep"], tables[f"{folder}/{budget}-curves"] = p_rep, table
    return tables, reports


def _by_history(p_rep: pd.DataFrame) -> list[str]:
    """P_rep with a column per number of steps the states trained on, where a mode has states
    of several (``representations.test_on: sequence``); no lines otherwise."""
    rows = [c for c in ("view", "arch", "state", "kind") if c in p_rep.columns]
    if p_rep.groupby(rows)["history"].nunique().max() < 2:
        return []
    wide = p_rep.pivot_table(index=rows, columns="history", values="p_rep", sort=False)
    wide.columns = [f"{steps} steps" for steps in wide.columns]
    return [
        "P_rep by the number of steps the state trained on (each tested on the same final "
        "step; mean over seeds).",
        "",
        wide.reset_index().to_markdown(index=False, floatfmt=".3f"),
        "",
    ]


def tabulate_shift_scores(
    records: list[ResultRecord], distances: Mapping[str, pd.DataFrame], spec: SequenceSpec
) -> tuple[dict[str, pd.DataFrame], dict[str, str]]:
    """The final step's shift as the pixels and as the models see it (docs/representations.md):
    ``quantify_shift``'s W2 and 1-NN of the last historical step to the final test set (over
    the final step's own train-vs-test distance, paper Tables 5-6), beside NED's minimum-distance
    detection AUROC of every historical state the results continue, per budget, architecture and
    historical mode, means over seeds. Nothing where no result has a detection score."""
    detected = [r for r in records if r.detection_auroc is not None and r.view is None]
    if not detected:
        return {}, {}
    per_state = {r.historical_state: r for r in detected}.values()  # one score per state
    models = pd.DataFrame([{"budget": r.budget, "arch": r.arch, "historical": r.historical,
                            "seed": r.seed, "detection_auroc": r.detection_auroc}
                           for r in per_state])  # fmt: skip
    models = (
        models.groupby(["budget", "arch", "historical"], sort=False)
        .agg(detection_auroc=("detection_auroc", "mean"), seeds=("seed", "nunique"))
        .reset_index()
    )
    pixels = []
    for key in sorted({r.sequence_key for r in detected}):
        if key not in distances:
            continue
        last = relative_to_final(distances[key]).iloc[:, -1]  # step T−1's column
        pixels.append({name: last[name] for name in ("W_X", "1-NN") if name in last})
    folder = report_folder(spec.name, spec.dataset)
    lines = [
        f"# Shift of `{spec.name}` ({spec.dataset}) into its final step: pixels and models",
        "",
    ]
    if pixels:
        pixel = pd.DataFrame(pixels).agg(["mean", "std"]).T.rename_axis("measure").reset_index()
        pixel["seeds"] = len(pixels)
        lines += ["Pixel space (`quantify_shift`): the last historical step's distance to the final "
                  "test set over the final step's own train-vs-test distance (1: no more shift "
                  "than in-distribution); W_X is W2 of the images, 1-NN the mean distance to the "
                  "nearest training image.", "", pixel.to_markdown(index=False, floatfmt=".3f"),
                  ""]  # fmt: skip
    else:
        lines += ["Pixel space: not measured for these seeds; `kedro run --pipeline "
                  "quantify_shift` measures it.", ""]  # fmt: skip
    lines += ["Model space: NED's minimum-distance detection, the AUROC of telling the final "
              "step's test images from the historical steps' held-out ones by their minimum "
              "cosine distance to the historical model's class means (0.5: the model cannot tell "
              "them apart).", "", models.to_markdown(index=False, floatfmt=".3f"), ""]  # fmt: skip
    tables = {f"{folder}/detection": models}
    if pixels:
        tables[f"{folder}/pixels"] = pixel
    return tables, {f"{folder}/shift_scores": "\n".join(lines)}
