"""Nodes that fit the final step for every planned job and report the results."""

from __future__ import annotations

import json
from collections import ChainMap
from collections.abc import Mapping
from typing import Any

from seq2final.config.parameters import MlflowOptions
from seq2final.core.plugins import plugin_paths
from seq2final.data.sequence import ShiftSequence
from seq2final.methods import HistoricalState
from seq2final.protocols import PROTOCOLS, ProtocolOptions
from seq2final.reporting.protocols import protocol_scores
from seq2final.reporting.tables import shown_name
from seq2final.runs.planner import load_states
from seq2final.runs.plans import RunPlan
from seq2final.runs.recipes import JobRecipe, historical_costs
from seq2final.tracking.jobs import JobTracker, TrackedJob

RESULT_COLUMNS = ("method", "test", "valid", "epochs", "seconds")


def job_recipes(
    sequence: ShiftSequence,
    plan: RunPlan,
    states: Mapping[str, HistoricalState],
    mlflow_options: Mapping[str, Any],
    plugins: list[str] | str | None,
) -> dict[str, JobRecipe | TrackedJob]:
    """One recipe per job, tracked in MLflow unless tracking is off.

    Every historical state is loaded and checked, and the MLflow experiment and registry names
    accepted, before any training.
    """
    loaded = load_states(plan, states)
    # once per state, from the states loaded (the store reads only the step-0 models they continue)
    costs = {key: historical_costs(key, ChainMap(loaded, states)) for key in loaded}
    recipes = {
        job.key: JobRecipe(
            plan,
            job,
            sequence,
            loaded.get(job.state_key),
            costs.get(job.state_key, {}),
            plan.force,
        )
        for job in plan.jobs
    }
    options = MlflowOptions.model_validate(mlflow_options)
    if not options.enabled:
        return recipes
    tracker = JobTracker.connect(
        options,
        plan,
        json.dumps(sequence.manifest["spec"], separators=(",", ":")),
        example=sequence.step(-1).split("test")[0][:2],
        num_classes=len(sequence.class_names),
        plugins=tuple(plugin_paths(plugins)),
        sequence_digest=sequence.content_hash,
    )
    return {key: TrackedJob(recipe, tracker) for key, recipe in recipes.items()}


def result_title(plan: RunPlan) -> str:
    """What the run's result table is about."""
    return f"{plan.sequence_name} ({plan.dataset}) · {plan.arch} · budget {plan.budget_name}"


def result_rows(results: Mapping[str, dict[str, Any]], plan: RunPlan) -> list[tuple[str, ...]]:
    """One row per method the run asked for (``RESULT_COLUMNS``), in the order asked; a name that
    maps to another method's job (``st_1`` on a ConvNet) says so."""
    rows = []
    for name, key in plan.requested:
        record = results[key]
        label = name if name == record["method"] else f"{name} (= {record['method']})"
        rows.append(
            (
                label,
                f"{record['test_accuracy']:.3f}",
                f"{record['valid_accuracy']:.3f}",
                str(record["epochs"]),
                f"{record['wall_seconds']:.1f}",
            )
        )
    return rows


def protocol_rows(
    results: Mapping[str, dict[str, Any]], plan: RunPlan
) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    """Under a temporal protocol: one row per method, the protocol's numbers over its views."""
    chosen = PROTOCOLS[plan.protocol]
    records = [results[job.key] for job in plan.jobs]
    scores = protocol_scores(records, plan.protocol, ProtocolOptions(**plan.protocol_options))
    columns = ("method", *chosen.reports, "seconds")
    seconds: dict[str, float] = {}
    for record in records:
        seconds[shown_name(record)] = seconds.get(shown_name(record), 0.0) + record["wall_seconds"]
    rows = [
        (row["method"], *(f"{row[m]:.3f}" for m in chosen.reports), f"{seconds[row['method']]:.1f}")
        for row in scores
    ]
    return columns, rows


def run_table(
    results: Mapping[str, dict[str, Any]], plan: RunPlan
) -> tuple[str, tuple[str, ...], list[tuple[str, ...]]]:
    """The run's table: its title, columns and rows (the final step's numbers per method, or
    under a temporal protocol the protocol's)."""
    if PROTOCOLS[plan.protocol].temporal:
        columns, rows = protocol_rows(results, plan)
        return f"{result_title(plan)} · protocol {plan.protocol}", columns, rows
    return result_title(plan), RESULT_COLUMNS, result_rows(results, plan)


def report_results(results: Mapping[str, dict[str, Any]], plan: RunPlan) -> dict[str, str]:
    """The run's result table as Markdown, kept under ``result_reports`` (the terminal shows it
    as a table when the run ends: :class:`seq2final.hooks.RunSummaryHook`)."""
    title, columns, rows = run_table(results, plan)
    name = f"{plan.sequence_key}/{plan.arch}-{plan.budget_name}"
    if PROTOCOLS[plan.protocol].temporal:
        name += f"-{plan.protocol}"
    lines = [
        f"# {title}",
        "",
        f"Sequence {plan.sequence_key}, seed {plan.seed}.",
        "",
        "| " + " | ".join(columns) + " |",
        "|" + "---|" * len(columns),
    ]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return {name: "\n".join(lines) + "\n"}
