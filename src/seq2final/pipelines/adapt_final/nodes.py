"""Nodes that fit the final step for every planned job and report the results."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from seq2final.config.parameters import EvaluateOptions
from seq2final.data.sequence import ShiftSequence
from seq2final.methods import ORACLE, paper_columns
from seq2final.protocols import PROTOCOLS
from seq2final.reporting.protocols import protocol_scores
from seq2final.reporting.tables import shown_name
from seq2final.runs.execution import StartStates, start_states, train_jobs
from seq2final.runs.plans import JobPlan, RunPlan
from seq2final.runs.result_store import ResultStore
from seq2final.runs.state_store import HistoricalStore
from seq2final.tracking.jobs import JobTracker
from seq2final.training.records import ResultRecord

RESULT_COLUMNS = ("method", "test", "valid", "epochs", "seconds", "")


@dataclass(frozen=True)
class RunTable:
    """A run's result table: rows sorted best first, the best and the reference marked."""

    title: str
    columns: tuple[str, ...]
    rows: dict[str, tuple[str, ...]]  # by method (a job's one name), best first
    best: str | None  # the row (its method) with the best score, the oracle aside
    reference: str | None  # the row (its method) every method is compared with, if run


def load_start_states(plan: RunPlan, states: HistoricalStore) -> StartStates:
    """Every historical state the plan's jobs start from, loaded and checked, with its training
    FLOPs: a missing one stops the run in one line naming the command that makes it, before any
    training or MLflow run (:func:`seq2final.runs.execution.start_states`)."""
    return start_states(plan, states)


def train_final_jobs(
    sequence: ShiftSequence,
    plan: RunPlan,
    start: StartStates,
    store: ResultStore,
) -> ResultStore:
    """Fits every job of the plan that ``store`` lacks on the historical state it starts from,
    storing each as soon as it is fitted (tracked in MLflow unless tracking is off); the store,
    now holding them.

    The MLflow experiment and registry names are accepted before any training.
    """
    tracker = JobTracker.connect(
        plan,
        json.dumps(sequence.manifest.spec.to_dict(), separators=(",", ":")),
        example=sequence.step(-1).split("test")[0][:2],
        num_classes=len(sequence.class_names),
        sequence_digest=sequence.content_hash,
    )
    train_jobs(plan, sequence, start.states, start.costs, store, tracker)
    return store


def result_title(plan: RunPlan) -> str:
    """What the run's result table is about."""
    return f"{plan.sequence_name} ({plan.dataset}) · {plan.arch} · budget {plan.budget_name}"


def _method_label(job: JobPlan) -> str:
    """A job's one name, with the other names it answers to (``st_1 (also st_b)``)."""
    names = job.names
    return names.name + (f" (also {', '.join(names.others)})" if names.others else "")


def _marks(
    scores: Mapping[str, float], reference: str
) -> tuple[list[str], dict[str, str], str | None, str | None]:
    """Methods by score, best first (ties in the paper's order), and each one's mark: ``best``
    for the best but the oracle (which sees ample final data, so the paper's tables never bold
    it), ``reference`` for the method others are compared with (``evaluate.reference``)."""
    order = {name: i for i, name in enumerate(paper_columns())}
    names = sorted(scores, key=lambda n: (-scores[n], order.get(n, len(order)), n))
    best = next((n for n in names if n != ORACLE), None)
    marks: dict[str, list[str]] = {name: [] for name in names}
    if best is not None:
        marks[best].append("best")
    if reference in marks:
        marks[reference].append("reference")
    if ORACLE in marks:
        marks[ORACLE].append("ample final data")
    notes = {name: ", ".join(m) for name, m in marks.items()}
    return names, notes, best, reference if reference in scores else None


def _row_name(plan: RunPlan, name: str) -> str:
    """The row a method appears under: a reference given by an alias (``st_b`` on a ConvNet,
    whose job is ``st_1``) marks its job's row."""
    return next((job.name for job in plan.jobs if name in job.names.others), name)


def result_rows(
    results: Mapping[str, ResultRecord], plan: RunPlan, reference: str
) -> tuple[dict[str, tuple[str, ...]], str | None, str | None]:
    """One row per job (``RESULT_COLUMNS``), by test accuracy, best first; the best method and
    the reference."""
    jobs = {job.name: job for job in plan.jobs}
    scores = {name: results[job.key].test_accuracy for name, job in jobs.items()}
    reference = _row_name(plan, reference)
    names, notes, best, shown_reference = _marks(scores, reference)
    rows: dict[str, tuple[str, ...]] = {}
    for name in names:
        record = results[jobs[name].key]
        rows[name] = (
            _method_label(jobs[name]),
            f"{record.test_accuracy:.3f}",
            f"{record.valid_accuracy:.3f}",
            str(record.epochs),
            f"{record.wall_seconds:.1f}",
            notes[name],
        )
    return rows, best, shown_reference


def protocol_rows(
    results: Mapping[str, ResultRecord], plan: RunPlan, reference: str
) -> tuple[tuple[str, ...], dict[str, tuple[str, ...]], str | None, str | None]:
    """Under a temporal protocol: one row per method, the protocol's numbers over its views, by
    its headline number, best first."""
    chosen = PROTOCOLS[plan.protocol]
    records = [results[job.key] for job in plan.jobs]
    scores = protocol_scores(records, plan.protocol, plan.protocol_options)
    columns = ("method", *chosen.reports, "seconds", "")
    seconds: dict[str, float] = {}
    for record in records:
        seconds[shown_name(record)] = seconds.get(shown_name(record), 0.0) + record.wall_seconds
    by_name = {row.method: row.numbers for row in scores}
    reference = _row_name(plan, reference)
    names, notes, best, shown_reference = _marks(
        {name: row[chosen.headline_report] for name, row in by_name.items()}, reference
    )
    rows = {
        name: (
            name,
            *(f"{by_name[name][m]:.3f}" for m in chosen.reports),
            f"{seconds[name]:.1f}",
            notes[name],
        )
        for name in names
    }
    return columns, rows, best, shown_reference


def run_table(
    results: Mapping[str, ResultRecord], plan: RunPlan, reference: str = "baseline"
) -> RunTable:
    """The run's table (the final step's numbers per method, or under a temporal protocol the
    protocol's), sorted best first, with the best method and ``reference`` marked."""
    if PROTOCOLS[plan.protocol].temporal:
        columns, rows, best, shown = protocol_rows(results, plan, reference)
        return RunTable(
            f"{result_title(plan)} · protocol {plan.protocol}", columns, rows, best, shown
        )
    rows, best, shown = result_rows(results, plan, reference)
    return RunTable(result_title(plan), RESULT_COLUMNS, rows, best, shown)


def rank_results(
    results: Mapping[str, ResultRecord], plan: RunPlan, evaluate: EvaluateOptions
) -> RunTable:
    """The run's result table, best first, with ``evaluate.reference`` marked (:func:`run_table`):
    what the run's report holds and the terminal shows when the run ends
    (:class:`seq2final.hooks.RunSummaryHook`)."""
    return run_table(results, plan, evaluate.reference)


def report_results(table: RunTable, plan: RunPlan) -> dict[str, str]:
    """The run's result table as Markdown, kept under ``result_reports``."""
    name = f"{plan.sequence_key}/{plan.arch}-{plan.budget_name}"
    if PROTOCOLS[plan.protocol].temporal:
        name += f"-{plan.protocol}"
    columns = [column or "note" for column in table.columns]
    lines = [
        f"# {table.title}",
        "",
        f"Sequence {plan.sequence_key}, seed {plan.seed}; best first.",
        "",
        "| " + " | ".join(columns) + " |",
        "|" + "---|" * len(columns),
    ]
    lines += ["| " + " | ".join(row) + " |" for row in table.rows.values()]
    return {name: "\n".join(lines) + "\n"}
