"""NED's minimum-distance detection as a model-based shift score of a job's final step
(docs/representations.md), read in the historical model the job continues."""

from __future__ import annotations

from seq2final.data.sequence import ShiftSequence
from seq2final.methods import HistoricalState
from seq2final.methods.heads import detection_auroc, has_linear_head
from seq2final.training.engine import Engine
from seq2final.training.records import ChosenChain
from seq2final.training.tensors import TensorSplit

# Scores by (historical state key, chain, sequence view key), shared by a run's jobs.
Detections = dict[tuple[str, str, str], float | None]


def detection_chain(state: HistoricalState, chosen: ChosenChain) -> str:
    """The name of the chain whose historical model :func:`history_detection` reads."""
    name = chosen.name
    return name if name in state.chains else next(iter(state.chains))


def history_detection(
    state: HistoricalState | None, chosen: ChosenChain, sequence: ShiftSequence,
    engine: Engine,
) -> float | None:  # fmt: skip
    """NED's minimum-distance detection, as a model-based shift score of the job's final step
    (docs/representations.md): the AUROC of telling the final step's test images from the
    historical steps' held-out ones (their test splits where they have them, else validation)
    by the minimum cosine distance to the class means of the historical training images, in
    the features of the historical model the job continues (its chosen chain's). ``None`` for a
    job without one, or whose model has no linear head to read features at (a joint model)."""
    if state is None or not state.chains:
        return None
    chain = state.chains[detection_chain(state, chosen)]
    if not has_linear_head(chain.last):
        return None
    history = range(sequence.num_steps - 1)
    held_out = ["test" if "test" in sequence.step(t).splits else "valid" for t in history]
    return detection_auroc(
        chain.last,
        TensorSplit.concat([_split(sequence, t, "train") for t in history]),
        TensorSplit.concat([_split(sequence, t, held_out[t]) for t in history]),
        _split(sequence, -1, "test"),
        engine,
        len(sequence.class_names),
    )


def _split(sequence: ShiftSequence, step: int, split: str) -> TensorSplit:
    return TensorSplit.from_arrays(*sequence.step(step).split(split))


def shared_detection(
    state: HistoricalState | None,
    state_key: str | None,
    chosen: ChosenChain,
    sequence: ShiftSequence,
    engine: Engine,
    detections: Detections | None,
) -> float | None:
    """:func:`history_detection`, which reads only the historical model and the sequence view:
    from ``detections`` where a job of the run scored them already."""
    if state is None or not state.chains or detections is None or state_key is None:
        return history_detection(state, chosen, sequence, engine)
    key = (state_key, detection_chain(state, chosen), sequence.key)
    if key not in detections:
        detections[key] = history_detection(state, chosen, sequence, engine)
    return detections[key]
