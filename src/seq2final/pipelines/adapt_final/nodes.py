"""Nodes that fit the final step for every planned job and report the results."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from seq2final.config.parameters import MlflowOptions
from seq2final.data.sequence import ShiftSequence
from seq2final.methods import HistoricalState
from seq2final.runs.planner import load_states
from seq2final.runs.plans import RunPlan
from seq2final.runs.recipes import JobRecipe
from seq2final.tracking.jobs import JobTracker, TrackedJob

log = logging.getLogger(__name__)

_COLUMNS = ("method", "test", "valid", "epochs", "seconds")


def job_recipes(
    sequence: ShiftSequence,
    plan: RunPlan,
    states: Mapping[str, HistoricalState],
    mlflow_options: Mapping[str, Any],
) -> dict[str, JobRecipe | TrackedJob]:
    """One recipe per job, tracked in MLflow unless tracking is off.

    Every historical state is loaded and checked, and the MLflow experiment and registry names
    accepted, before any training.
    """
    loaded = load_states(plan, states)
    recipes = {
        job.key: JobRecipe(plan, job, sequence, loaded.get(job.state_key), plan.force)
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
    )
    return {key: TrackedJob(recipe, tracker) for key, recipe in recipes.items()}


def report_results(results: Mapping[str, dict[str, Any]], plan: RunPlan) -> dict[str, str]:
    """The compact result table of this run's jobs, logged and kept as Markdown."""
    lines = [
        f"Results on {plan.sequence_key} ({plan.arch}, budget {plan.budget_name}):",
        "| " + " | ".join(_COLUMNS) + " |",
        "|" + "---|" * len(_COLUMNS),
    ]
    for name, key in plan.requested:
        record = results[key]
        label = name if name == record["method"] else f"{name} (= {record['method']})"
        lines.append(
            f"| {label} | {record['test_accuracy']:.3f} | {record['valid_accuracy']:.3f} "
            f"| {record['epochs']} | {record['wall_seconds']:.1f} |"
        )
    table = "\n".join(lines)
    log.info("\n%s", table)
    return {f"{plan.sequence_key}/{plan.arch}-{plan.budget_name}": table + "\n"}
