"""Nodes that plan the run's jobs and hand the historical states to train to their store."""

from __future__ import annotations

from typing import Any

from seq2final.data.sequence import ShiftSequence
from seq2final.data.spec import SequenceSpec
from seq2final.runs.planner import plan_run
from seq2final.runs.plans import RunPlan
from seq2final.runs.recipes import StateRecipe


def plan_jobs(
    spec: SequenceSpec,
    sequence: ShiftSequence,
    method: str | None,
    historical: str | None,
    final: str | None,
    arch: str,
    budget: str,
    force: bool,
    budgets: dict[str, Any],
    training: dict[str, Any],
    tuning: dict[str, Any],
    historical_modes: dict[str, Any],
    final_modes: dict[str, Any],
    options: dict[str, Any],
    protocol: str = "final",
    protocol_options: dict[str, Any] | None = None,
    protocol_view: str | None = None,
) -> RunPlan:
    """Which jobs the run parameters ask for, and the keyed historical states they need.

    With no method and no modes given, every registered method runs: the default run covers all
    18. One node walks them all (rather than one namespaced pipeline per method) because Kedro
    builds pipelines before it reads parameters, and a per-method fan-out would put 18 copies of
    the same nodes in kedro-viz.
    """
    request = {
        "method": method,
        "historical": historical,
        "final": final,
        "arch": arch,
        "budget": budget,
        "force": force,
        "protocol": protocol,
        "protocol_options": protocol_options or {},
        "protocol_view": protocol_view,
    }
    return plan_run(
        spec, request, budgets, training, tuning, historical_modes, final_modes, options["step0"],
        sequence.content_hash,
    )  # fmt: skip


def historical_recipes(sequence: ShiftSequence, plan: RunPlan) -> dict[str, StateRecipe]:
    """One recipe per needed state, step-0 before the chains that start from it.

    The store runs a recipe only if its key is not stored yet, so shared states (the ERM model of
    FT, LP-FT, ST-1 and ST-B; the step-0 model of SFT, EWC and SST) are trained once.
    """
    return {state.key: StateRecipe(plan, state, sequence) for state in plan.states}
