"""A temporal protocol's scores from result records, and its tables.

The jobs of a temporal protocol are one per view (a method trained on steps 0..t, say), each
record holding the accuracy of its model on every step of the sequence. A method's score under the
protocol needs all the views the protocol asks for, at one architecture, seed and budget: those
records are grouped, the protocol scores them, and each reported number becomes a table of
methods × architectures like the paper's.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import pandas as pd

from seq2final.protocols import PROTOCOLS, ProtocolOptions, StepAccuracies, options_for
from seq2final.reporting.tables import (
    ResultTable,
    render,
    seed_cells,
    shown_name,
    to_csv_frame,
    train_flops_once,
)
from seq2final.training.records import ResultRecord

log = logging.getLogger(__name__)

LABELS = {
    "id_accuracy": "in-distribution accuracy (pooled held-out images of steps 0..split)",
    "ood_average": "out-of-distribution accuracy, mean over the later steps",
    "ood_worst": "out-of-distribution accuracy, worst later step",
    "average": "accuracy over each time's window, mean over times",
    "worst": "worst step of each time's window, mean over times",
    "stream_accuracy": "accuracy on each step before training on it, mean over the stream",
    "p_cl": "P_CL: mean accuracy over the steps seen, at the stream's last time",
    "p_forget": "P_forget (Eq. 8): best accuracy of any time so far minus the last time's, mean over the steps seen",
}


@dataclass(frozen=True)
class ProtocolScore:
    """One (budget, architecture, method, seed)'s score under a temporal protocol: the group's
    keys, the training FLOPs of every view it trained (each historical state once) and the
    protocol's own numbers (``numbers``: its ``reports`` and what its figures draw, such as
    Eval-Stream's ``per_time``), as its ``score`` function returned them."""

    budget: str
    arch: str
    method: str
    seed: int
    train_flops: int
    numbers: Mapping[str, Any]

    def flat(self) -> dict[str, Any]:
        """The row as one mapping, the protocol's numbers beside the keys (a table's row)."""
        keys = {k: v for k, v in asdict(self).items() if k != "numbers"}
        return {**keys, **self.numbers}


def step_table(record: ResultRecord) -> StepAccuracies:
    """A record's per-step accuracies with integer step keys (JSON keeps them as strings); none
    for a record made under the final protocol."""
    return {int(step): row for step, row in (record.step_accuracies or {}).items()}


def protocol_scores(
    records: Iterable[ResultRecord], protocol: str, options: ProtocolOptions
) -> list[ProtocolScore]:
    """One row per (budget, architecture, method, seed) whose records cover every view the
    protocol asks for: the keys of the group and the protocol's score. A group missing views is
    left out with a warning naming them (its runs are not finished)."""
    chosen = PROTOCOLS[protocol]
    groups: dict[tuple[Any, ...], dict[str, Any]] = {}
    first: dict[tuple[Any, ...], ResultRecord] = {}  # time 0's model, one for every method
    for record in records:
        view_of = record.view
        if view_of is None:
            continue
        if len(view_of.steps) == 1:  # protocols.FIRST_MODEL
            first[(record.budget, record.arch, record.seed)] = record
            continue
        cell = (record.budget, record.arch, shown_name(record), record.seed)
        if cell not in groups:
            groups[cell] = {
                "views": {}, "records": {}, "num_steps": len(record.step_accuracies or {}),
                "options": options_for(options, record.sequence, record.dataset),
            }  # fmt: skip
        view = view_of.name
        groups[cell]["views"][view] = step_table(record)
        groups[cell]["records"][view] = record
    rows = []
    for (budget, arch, method, seed), group in sorted(groups.items(), key=str):
        shared = first.get((budget, arch, seed))
        if shared is not None and shared.view is not None:
            group["views"].setdefault(shared.view.name, step_table(shared))
            group["records"].setdefault(shared.view.name, shared)
        wanted = [view.name for view in chosen.views(group["num_steps"], group["options"])]
        missing = [name for name in wanted if name not in group["views"]]
        if missing:
            log.warning(
                "%s on %s (budget %s, seed %d) has no result for view(s) %s of protocol %s; "
                "it is left out of the tables until they are run",
                method, arch, budget, seed, ", ".join(missing), protocol,
            )  # fmt: skip
            continue
        score = chosen.score(group["views"], group["num_steps"], group["options"])
        # what the protocol cost: every view it trains, and each historical state they continue
        # once (views that start at step 0 share its model)
        flops = train_flops_once(group["records"][name] for name in wanted)
        rows.append(ProtocolScore(budget, arch, method, seed, flops, score))
    return rows


def protocol_tables(
    rows: list[ProtocolScore], protocol: str, title: str, folder: str
) -> tuple[dict[str, pd.DataFrame], dict[str, str], dict[str, str]]:
    """Per budget and reported number: methods × architectures as CSV, Markdown and LaTeX, with
    the paper's emphasis (bold within 0.02 of the best method)."""
    csv: dict[str, pd.DataFrame] = {}
    markdown: dict[str, str] = {}
    latex: dict[str, str] = {}
    for budget in sorted({row.budget for row in rows}):
        group = [row for row in rows if row.budget == budget]
        for metric in PROTOCOLS[protocol].reports:
            table = ResultTable.from_cells(
                seed_cells((r.arch, r.method, r.seed, r.numbers[metric]) for r in group)
            )
            name = f"{folder}/{protocol}/{budget}-{metric}"
            csv[name] = to_csv_frame(table)
            heading = f"# {title}, budget {budget}, protocol {protocol}: {LABELS[metric]}\n\n"
            markdown[name] = heading + render(table, "markdown")
            latex[name] = render(table, "latex")
    return csv, markdown, latex
