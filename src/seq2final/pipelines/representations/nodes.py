"""The node that fits the data-efficiency curves of the run's historical states."""

from __future__ import annotations

from seq2final.config.parameters import CurveOptions
from seq2final.data.sequence import ShiftSequence
from seq2final.representations.train import train_curves
from seq2final.runs.execution import StartStates
from seq2final.runs.frame_store import FrameStore
from seq2final.runs.plans import RunPlan


def fit_representation_curves(
    sequence: ShiftSequence,
    plan: RunPlan,
    start: StartStates,
    store: FrameStore,
    options: CurveOptions,
) -> FrameStore:
    """Fits the curve points ``store`` lacks from the states the plan's jobs start from, storing
    each as soon as it is fitted; the store, now holding them all
    (:func:`seq2final.representations.train.train_curves`)."""
    train_curves(plan, sequence, start.states, store, options)
    return store
