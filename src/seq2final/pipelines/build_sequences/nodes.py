"""Nodes that resolve, build, persist and illustrate a sequence."""

from __future__ import annotations

import logging
from collections.abc import Mapping

import numpy as np
from matplotlib.figure import Figure

from seq2final.config.parameters import BuildOptions
from seq2final.core.errors import MissingPrerequisiteError
from seq2final.data.fingerprints import source_change
from seq2final.data.sampler import build_sequence
from seq2final.data.sequence import ShiftSequence
from seq2final.data.sources import SourceData, load_source
from seq2final.data.spec import SequenceSpec
from seq2final.reporting import plots

log = logging.getLogger(__name__)


def load_source_data(spec: SequenceSpec, options: BuildOptions) -> SourceData:
    """The source pools the sequence is drawn from."""
    return load_source(spec.dataset, spec.data_path, options.raw_dir, spec.data_options)


def build(spec: SequenceSpec, source: SourceData) -> dict[str, ShiftSequence]:
    """Sample every step; keyed by the spec so sequences never overwrite one another. The
    images per step and class are logged before anything trains, a line a step (and stored
    beside the sequence as ``counts.csv``)."""
    sequence = build_sequence(spec, source)
    counts = sequence.counts()
    classes = sequence.class_names
    for step, row in counts.iterrows():  # one record a step: a log stays one line per record
        log.info("%s: %d images (train %d, valid %d, test %d): %s", step, row[classes].sum(),
                 row["train"], row["valid"], row["test"],
                 ", ".join(f"{name} {row[name]}" for name in classes))  # fmt: skip
    return {spec.key: sequence}


def _command(spec: SequenceSpec) -> str:
    params = [f"sequence:{spec.name}", f"seed:{spec.seed}", f"dataset:{spec.dataset}"]
    if spec.data_path:
        params.append(f"data_path:{spec.data_path}")
    params += [f"data_options.{k}:{v}" for k, v in (spec.data_options or {}).items()]
    return f"kedro run --pipeline build_sequences --params {','.join(params)}"


def select_sequence(
    sequences: Mapping[str, ShiftSequence], spec: SequenceSpec, options: BuildOptions
) -> ShiftSequence:
    """The stored sequence for ``spec``, drawn from the source data as it is now.

    A missing sequence names the command that builds it; so does one drawn from source data that
    has changed since (an ``npz`` replaced at the same path), which would otherwise train on, or
    reuse results of, the old data.
    """
    if spec.key not in sequences:
        raise MissingPrerequisiteError(
            f"sequence '{spec.key}' has not been built; make it with: {_command(spec)}"
        )
    sequence = sequences[spec.key]
    changed = source_change(sequence.manifest.source_fingerprint, spec.dataset, spec.data_path, options.raw_dir,
                            spec.data_options)  # fmt: skip
    if changed:
        recorded, current = changed
        raise MissingPrerequisiteError(
            f"sequence '{spec.key}' was drawn from other {spec.dataset} data than "
            f"{spec.data_path or options.raw_dir} holds now (fingerprint {recorded}, now "
            f"{current}); rebuild it with: {_command(spec)}"
        )
    return sequence


def plot_examples(sequence: ShiftSequence, options: BuildOptions) -> dict[str, Figure]:
    """The examples of every step in one figure, plus the sub-class membership figure for
    sub-population shifts."""
    spec = sequence.manifest.spec
    title = (
        f"{spec.name} on {spec.dataset}, seed {spec.seed}: "
        "the first training image of each class, per step"
    )
    examples = [(step.name, *step.split("train")) for step in sequence.steps()]
    figures = {
        f"{sequence.key}/examples": plots.sequence_examples(
            examples, sequence.class_names, title, sequence.key, options.example_columns
        )
    }
    subclass_names = sequence.manifest.subclass_names
    if subclass_names and "sub_train" in sequence.step(0).arrays:
        steps = [
            (s.name, s.arrays["x_train"], s.arrays["y_train"], s.arrays["sub_train"])
            for s in sequence.steps()
        ]
        shown = list(np.arange(len(sequence.class_names))[: min(5, len(sequence.class_names))])
        figures[f"{sequence.key}/subpopulations"] = plots.subpopulation_grid(
            steps, sequence.class_names, subclass_names, shown
        )
    return figures
