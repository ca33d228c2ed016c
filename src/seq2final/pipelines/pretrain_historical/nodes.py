"""Nodes that plan the run's jobs and train the historical states they need."""

from __future__ import annotations

from typing import Any

from seq2final.data.sequence import ShiftSequence
from seq2final.data.spec import SequenceSpec
from seq2final.runs.planner import plan_run
from seq2final.runs.plans import RunPlan
from seq2final.runs.state_store import HistoricalStore
from seq2final.runs.training import train_states


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
    history = sequence.history_hash if options.get("shared_history") else None
    return plan_run(
        spec, request, budgets, training, tuning, historical_modes, final_modes, options["step0"],
        sequence.content_hash, history,
    )  # fmt: skip


def train_historical_states(
    sequence: ShiftSequence, plan: RunPlan, store: HistoricalStore
) -> HistoricalStore:
    """Trains the historical states the plan needs and ``store`` lacks, storing each as soon as
    it is trained; the store, now holding them all.

    A state shared by several methods is trained once, and a state stored by an earlier run (or
    by another process meanwhile) is reused (:func:`seq2final.runs.training.train_states`).
    """
    train_states(plan, sequence, store)
    return store
