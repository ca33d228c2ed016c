"""Sequence specifications: the spec-string grammar and the run parameters resolved into a spec.

A sequence spec is the paper's colon-separated list of steps, each step one or more shift blocks
(joined by ``,`` or ``+``) with an optional train+valid size, and an optional leading ``source``
step::

    source6000:corruption4000:label_flip6000:rotation4000
    rotation:corruption+label_flip          # sizes from the dataset's defaults
    source600:rotation@15/300:corruption@2+label_flip@0.2/300   # intensities (docs/intensity.md)

A block may carry an intensity after ``@`` (:mod:`seq2final.data.shifts`), written the shortest
way (``15``, ``0.2``: no ``15.0``, ``0.20`` or ``-0``); a size after an intensity follows a
``/`` (any step may write it so), since ``rotation@15300`` would read as one number.

Step 0 (the source) is never shifted. Every step draws fresh images per class from the source's
train pool with its own seed and applies the cumulative shift state; the final step also draws
its test set from the source's test pool, so test images never overlap training images
(:mod:`seq2final.data.sampler`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from seq2final.core.errors import Seq2FinalError
from seq2final.core.schema import StrictModel
from seq2final.data.presets import NATURAL, PRESETS, SequencePreset
from seq2final.data.shifts import SHIFTS, check_block, split_block
from seq2final.data.sizes import PAPER_SIZES, DefaultSizes
from seq2final.data.sources import SOURCES, checked_options

STEP_SEED_HIGH = 10000
TRAIN_FRACTION = 0.8
"""The share of a step's images that trains (the rest validates), as the original samples."""
_LATER_OPTIONS: dict[str, Any] = {
    "step_tests": False,
    "train_fraction": TRAIN_FRACTION,
    "view": None,
    "data_options": None,
}


@dataclass(frozen=True)
class StepSpec:
    """One time step: the shift blocks it adds and its train+valid size."""

    blocks: tuple[str, ...]
    size: int

    @property
    def names(self) -> tuple[str, ...]:
        """The blocks' registry names, without their intensities."""
        return tuple(split_block(block)[0] for block in self.blocks)


def name_slug(name: str) -> str:
    """The file-system-safe start of every key of sequence ``name`` (its stored sequence's and,
    through it, its states' and jobs')."""
    return re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-")[:40] or "sequence"


@dataclass(frozen=True)
class SequenceSpec:
    """Everything that determines a built sequence; its :attr:`key` names the stored result."""

    name: str
    dataset: str
    data_path: str | None
    steps: tuple[StepSpec, ...]
    test_size: int
    oracle_size: int | None
    seed: int
    natural: bool = False
    step_tests: bool = False
    train_fraction: float = TRAIN_FRACTION
    view: str | None = None  # a protocol's view of the sequence (its steps are the view's)
    data_options: dict[str, Any] | None = None  # the dataset's own options (a user's own data)

    @property
    def num_targets(self) -> int:
        return len(self.steps) - 1

    def to_dict(self) -> dict[str, Any]:
        """The spec as stored in manifests and hashed into keys. The options the temporal
        protocols added appear only when set, so every sequence built without them keeps its
        key and manifest byte for byte."""
        values = asdict(self)
        for name, default in _LATER_OPTIONS.items():
            if values[name] == default:
                del values[name]
        return values

    @property
    def key(self) -> str:
        """A file-system-safe name that changes whenever anything in the spec changes."""
        digest = hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()
        return f"{name_slug(self.name)}-{self.dataset}-seed{self.seed}-{digest[:10]}"

    def step_seeds(self) -> list[int]:
        """Seed of every step: the run seed for the source, then draws from it for the targets."""
        rng = np.random.RandomState(self.seed)
        return [self.seed] + [int(rng.randint(0, STEP_SEED_HIGH)) for _ in range(self.num_targets)]


_BLOCK = r"[a-z_]+(?:@-?\d+(?:\.\d+)?)?"
_STEP = re.compile(
    rf"^(?P<blocks>{_BLOCK}(?:[,+]{_BLOCK})*)?(?:(?<=[a-z_])(?P<size>\d+)|/(?P<after>\d+))?$"
)
_SPEC_HELP = (
    "write steps as shift blocks with an optional size, e.g. "
    "'source6000:rotation4000:corruption+label_flip', or with intensities "
    "'source600:rotation@15/300:label_flip@0.2/300'"
)


def _size_inside(block: str) -> bool:
    """Whether ``block``'s refused intensity could be a valid one with a size written after it
    without '/' (``rotation@15300``), so the refusal should say where sizes go."""
    name, _, digits = block.partition("@")
    for cut in range(1, len(digits)):
        head, tail = digits[:cut], digits[cut:]
        if tail.isdigit() and int(tail) >= 2 and not tail.startswith("0"):
            try:
                check_block(f"{name}@{head}")
            except Seq2FinalError:
                continue
            return True
    return False


def parse_spec(text: str, sizes: DefaultSizes) -> tuple[StepSpec, ...]:
    """Parse a spec string into steps (step 0 = source), filling missing sizes from ``sizes``."""
    tokens = text.strip().split(":")
    if tokens and tokens[0].startswith("source"):
        head, tokens = tokens[0], tokens[1:]
        digits = head.removeprefix("source")
        if digits and not digits.isdigit():
            raise Seq2FinalError(
                f"malformed sequence '{text}': bad source step '{head}'; {_SPEC_HELP}"
            )
        source_size = int(digits) if digits else sizes.source
    else:
        source_size = sizes.source
    if not tokens or tokens == [""]:
        raise Seq2FinalError(f"malformed sequence '{text}': no shifted step; {_SPEC_HELP}")
    steps = [StepSpec((), source_size)]
    for position, token in enumerate(tokens, start=1):
        match = _STEP.match(token.strip())
        if not token.strip() or match is None or match.group("blocks") is None:
            raise Seq2FinalError(
                f"malformed sequence '{text}': step {position} is '{token}'; {_SPEC_HELP}"
            )
        blocks = tuple(re.split(r"[,+]", match.group("blocks")))
        for block in blocks:
            if split_block(block)[0] not in SHIFTS:
                raise Seq2FinalError(
                    f"unknown shift block '{block}' in sequence '{text}'; valid: {', '.join(SHIFTS)}"
                )
        size = match.group("size") or match.group("after")
        for block in blocks:
            try:
                check_block(block)
            except Seq2FinalError as error:
                if size is None and block == blocks[-1] and _size_inside(block):
                    raise Seq2FinalError(
                        f"{error} (a size after an intensity follows '/': 'rotation@15/300')"
                    ) from None
                raise
        steps.append(StepSpec(blocks, int(size) if size else sizes.target(position, len(tokens))))
    for step in steps:
        if step.size < 2:
            raise Seq2FinalError(
                f"sequence '{text}': step size {step.size} is too small; valid: >= 2"
            )
    return tuple(steps)


def _known_sequence(sequence: str, dataset: str | None) -> tuple[str, SequencePreset | None]:
    """The sequence asked for and its preset: ``natural`` for a dataset that is a sequence by
    itself (a user's own folder) named with a preset of shifts; an unknown name is one line."""
    preset = PRESETS.get(sequence)
    if (
        dataset is not None
        and SOURCES[dataset].natural
        and (sequence == NATURAL or (preset is not None and preset.spec != NATURAL))
    ):  # its periods in place of the preset's shifts
        return NATURAL, None
    if (
        preset is None
        and sequence != NATURAL
        and ":" not in sequence
        and not {split_block(b)[0] for b in re.split(r"[,+]", sequence)} <= set(SHIFTS)
    ):
        raise Seq2FinalError(
            f"unknown sequence '{sequence}'; valid: a preset ({', '.join(PRESETS)}) "
            f"or a spec of shift blocks ({', '.join(SHIFTS)}) such as 'rotation:corruption'"
        )
    return sequence, preset


def _period_steps(
    dataset: str, data_path: str | None, checked: StrictModel | None
) -> tuple[StepSpec, ...]:
    """A natural source's steps, one whole period each. One that insists on every period has a
    known number, which the temporal protocols' views need before it is loaded; a user's own
    data is counted from its table, where a bad one is found before any work."""
    source = SOURCES[dataset]
    periods = source.periods or 0
    if source.count is not None and checked is not None:
        periods = source.count(dataset, Path(data_path) if data_path else None, checked)
    return tuple(StepSpec((NATURAL,), 0) for _ in range(periods))


def resolve_spec(
    sequence: str,
    dataset: str | None = None,
    data_path: str | None = None,
    seed: int | None = None,
    test_size: int | None = None,
    oracle_size: int | None = None,
    step_tests: bool = False,
    train_fraction: float = TRAIN_FRACTION,
    data_options: Mapping[str, Any] | None = None,
) -> SequenceSpec:
    """Turn the user's run parameters into a full :class:`SequenceSpec` (no data is read).

    ``sequence`` is a preset name or a spec string; ``dataset`` overrides a preset's dataset and
    defaults to ``digits`` for spec strings; sizes not given come from the dataset's defaults.
    ``step_tests`` gives every step a test split (the temporal protocols test on earlier and later
    steps), ``train_fraction`` the share of a step's train+valid images that trains.
    """
    if not 0.0 < train_fraction < 1.0:
        raise Seq2FinalError(
            f"train_fraction {train_fraction}: valid: a share strictly between 0 and 1"
        )
    sequence, preset = _known_sequence(sequence, dataset)
    dataset = dataset or (preset.dataset if preset else "digits")
    source = SOURCES[dataset]  # unknown names are answered with the valid list
    sizes = source.default_sizes
    spec_text = preset.spec if preset else sequence
    if preset is not None and dataset != preset.dataset and sizes != PAPER_SIZES:
        # the paper's sizes do not fit a small dataset: keep the shifts, take its own sizes
        spec_text, preset = re.sub(r"\d+", "", spec_text), None
    checked = checked_options(dataset, data_options)  # a bad option: one line, before any work
    if step_tests and getattr(checked, "final_labelled", None) is not None:
        raise Seq2FinalError(
            "data_options.final_labelled under a temporal protocol: valid only under protocol "
            "final (the temporal protocols hold out a tenth of every period as its test split)"
        )
    natural = spec_text == NATURAL
    if natural != source.natural:
        naturals = [name for name, entry in SOURCES.items() if entry.natural]
        raise Seq2FinalError(
            f"dataset '{dataset}' does not fit sequence '{sequence}'; valid: "
            f"{', '.join(naturals)} with sequence:{NATURAL} or a preset of theirs, any other "
            "dataset with shift sequences"
        )
    steps = _period_steps(dataset, data_path, checked) if natural else parse_spec(spec_text, sizes)
    return SequenceSpec(
        name=sequence,
        dataset=dataset,
        data_path=data_path,
        steps=steps,
        test_size=test_size or (preset.test_size if preset and preset.test_size else sizes.test),
        oracle_size=None
        if natural
        else oracle_size or (preset.oracle_size if preset and preset.oracle_size else sizes.oracle),
        seed=preset.seed if seed is None and preset else (1007 if seed is None else seed),
        natural=natural,
        step_tests=step_tests,
        train_fraction=train_fraction,
        data_options=None if checked is None else checked.model_dump(exclude_defaults=True) or None,
    )
