"""Nodes that plan the run's jobs and train the historical states they need."""

from __future__ import annotations

from seq2final.config.checks import CheckedRun
from seq2final.data.sequence import ShiftSequence
from seq2final.runs.execution import train_states
from seq2final.runs.planner import plan_run
from seq2final.runs.plans import RunPlan
from seq2final.runs.state_store import HistoricalStore


def plan_jobs(run: CheckedRun, sequence: ShiftSequence) -> RunPlan:
    """Which jobs the checked run asks for, and the keyed historical states they need, on the
    stored sequence (whose content the keys hold).

    With no method and no modes given, every registered method runs: the default run covers all
    18. One node walks them all (rather than one namespaced pipeline per method) because Kedro
    builds pipelines before it reads parameters, and a per-method fan-out would put 18 copies of
    the same nodes in kedro-viz.
    """
    options = run.parameters.pretrain_historical
    shared = options is not None and options.shared_history
    return plan_run(run, sequence.content_hash, sequence.history_hash if shared else None)


def train_historical_states(
    sequence: ShiftSequence, plan: RunPlan, store: HistoricalStore
) -> HistoricalStore:
    """Trains the historical states the plan needs and ``store`` lacks, storing each as soon as
    it is trained; the store, now holding them all.

    A state shared by several methods is trained once, and a state stored by an earlier run (or
    by another process meanwhile) is reused (:func:`seq2final.runs.execution.train_states`).
    """
    train_states(plan, sequence, store)
    return store
