"""Nodes that fit the final step for every planned job and report the results."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from seq2final.jobs import JobRecipe, RunPlan, load_states
from seq2final.methods import HistoricalState
from seq2final.sequences import ShiftSequence

log = logging.getLogger(__name__)

_COLUMNS = ("method", "test", "valid", "epochs", "seconds")


def job_recipes(
    sequence: ShiftSequence, plan: RunPlan, states: Mapping[str, HistoricalState]
) -> dict[str, JobRecipe]:
    """One recipe per job; every historical state is loaded and checked before any training."""
    loaded = load_states(plan, states)
    return {
        job.key: JobRecipe(plan, job, sequence, loaded.get(job.state_key), plan.force)
        for job in plan.jobs
    }


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
