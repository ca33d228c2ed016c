"""Sequences of shifted datasets: spec strings, named presets, sampling and the built result.

A sequence spec is the paper's colon-separated list of steps, each step one or more shift blocks
(joined by ``,`` or ``+``) with an optional train+valid size, and an optional leading ``source``
step::

    source6000:corruption4000:label_flip6000:rotation4000
    rotation:corruption+label_flip          # sizes from the dataset's defaults

Step 0 (the source) is never shifted. Every step draws fresh images per class from the source's
train pool with its own seed and applies the cumulative shift state; the final step also draws
its test set from the source's test pool, so test images never overlap training images. Per class
(and per sub-class) the draw is split 80/20 into train and valid with a floor, exactly as the
original benchmark samples, including its random-number order. The sub-population sampler's
over-filling bug is not kept: a sub-class with proportion 0 gets no images.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from seq2final.data import SourceData
from seq2final.errors import Seq2FinalError
from seq2final.registry import Registry
from seq2final.shifts import SHIFTS, ShiftState, advance, apply_state

TRAIN_FRACTION = 0.8
STEP_SEED_HIGH = 10000
PORTRAITS_FINAL_SPLIT = (0.4, 0.5)  # cumulative: train 40 %, valid 10 %, test 50 %


@dataclass(frozen=True)
class DefaultSizes:
    """Sizes used for steps whose spec gives none: source, alternating targets, test, oracle."""

    source: int
    targets: tuple[int, int]
    test: int
    oracle: int

    def target(self, position: int, count: int) -> int:
        """Size of target step ``position`` (1-based) of ``count``: a, b, a, ..., final a."""
        return self.targets[0] if position == count or position % 2 == 1 else self.targets[1]


PAPER_SIZES = DefaultSizes(source=6000, targets=(4000, 6000), test=5000, oracle=20000)
DEFAULT_SIZES: dict[str, DefaultSizes] = {
    "digits": DefaultSizes(source=500, targets=(300, 500), test=200, oracle=600),
}


@dataclass(frozen=True)
class StepSpec:
    """One time step: the shift blocks it adds and its train+valid size."""

    blocks: tuple[str, ...]
    size: int


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

    @property
    def num_targets(self) -> int:
        return len(self.steps) - 1

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def key(self) -> str:
        """A file-system-safe name that changes whenever anything in the spec changes."""
        digest = hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()
        slug = re.sub(r"[^A-Za-z0-9]+", "-", self.name).strip("-")[:40] or "sequence"
        return f"{slug}-{self.dataset}-seed{self.seed}-{digest[:10]}"

    def step_seeds(self) -> list[int]:
        """Seed of every step: the run seed for the source, then draws from it for the targets."""
        rng = np.random.RandomState(self.seed)
        return [self.seed] + [int(rng.randint(0, STEP_SEED_HIGH)) for _ in range(self.num_targets)]


@dataclass(frozen=True)
class SequencePreset:
    """A named sequence of the paper (or a small version of one for the default run)."""

    dataset: str
    spec: str
    description: str
    test_size: int | None = None
    oracle_size: int | None = None
    seed: int = 1007


PRESETS: Registry[SequencePreset] = Registry("sequence preset")
NATURAL = "natural"  # the spec of a source that is a sequence by itself


def _paper(spec: str, description: str, dataset: str = "cifar10") -> SequencePreset:
    return SequencePreset(dataset, spec, description, test_size=5000, oracle_size=20000)


for _name, _preset in {
    "clr": _paper("source6000:corruption4000:label_flip6000:rotation4000", "corruption, label flip, rotation"),
    "rcl": _paper("source6000:rotation4000:corruption6000:label_flip4000", "rotation, corruption, label flip"),
    "rrr": _paper("source6000:rotation_cond4000:rotation_cond6000:rotation_cond4000", "conditional rotation x3"),
    "ttt": _paper("source6000:recolor4000:recolor6000:recolor4000", "red tinting x3"),
    "sss": _paper("source6000:subpop4000:subpop6000:subpop4000", "sub-population shift x3", "cifar100"),
    "rot2": _paper("source16000:rotation4000", "rotation length study, 2 steps"),
    "rot3": _paper("source10000:rotation6000:rotation4000", "rotation length study, 3 steps"),
    "rot4": _paper("source6000:rotation4000:rotation6000:rotation4000", "rotation length study, 4 steps"),
    "rot5": _paper("source4000" + ":rotation4000" * 4, "rotation length study, 5 steps"),
    "rot6": _paper("source4000" + ":rotation3000" * 4 + ":rotation4000", "rotation length study, 6 steps"),
    "rot7": _paper("source4000:rotation2000:rotation3000:rotation2000:rotation3000:rotation2000:rotation4000", "rotation length study, 7 steps"),
    "rot8": _paper("source4000" + ":rotation2000" * 6 + ":rotation4000", "rotation length study, 8 steps"),
    "portraits": SequencePreset("portraits", NATURAL, "yearbook portraits by decade, 1930s to 2000s"),
    "digits_clr": SequencePreset("digits", "corruption:label_flip:rotation", "small CLR on digits"),
    "digits_rcl": SequencePreset("digits", "rotation:corruption:label_flip", "small RCL on digits"),
    "digits_rrr": SequencePreset("digits", "rotation_cond:rotation_cond:rotation_cond", "small rrr on digits"),
    "digits_ttt": SequencePreset("digits", "recolor:recolor:recolor", "small TTT on digits"),
    "digits_sss": SequencePreset("digits", "subpop:subpop:subpop", "small sss on digits (even/odd)"),
}.items():  # fmt: skip
    PRESETS.add(_name, _preset)

_STEP = re.compile(r"^(?P<blocks>[a-z_]+(?:[,+][a-z_]+)*)?(?P<size>\d+)?$")
_SPEC_HELP = "write steps as shift blocks with an optional size, e.g. 'source6000:rotation4000:corruption+label_flip'"


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
            if block not in SHIFTS:
                raise Seq2FinalError(
                    f"unknown shift block '{block}' in sequence '{text}'; valid: {', '.join(SHIFTS)}"
                )
        size = match.group("size")
        steps.append(StepSpec(blocks, int(size) if size else sizes.target(position, len(tokens))))
    for step in steps:
        if step.size < 2:
            raise Seq2FinalError(
                f"sequence '{text}': step size {step.size} is too small; valid: >= 2"
            )
    return tuple(steps)


def resolve_spec(
    sequence: str,
    dataset: str | None = None,
    data_path: str | None = None,
    seed: int | None = None,
    test_size: int | None = None,
    oracle_size: int | None = None,
) -> SequenceSpec:
    """Turn the user's run parameters into a full :class:`SequenceSpec` (no data is read).

    ``sequence`` is a preset name or a spec string; ``dataset`` overrides a preset's dataset and
    defaults to ``digits`` for spec strings; sizes not given come from the dataset's defaults.
    """
    from seq2final.data import SOURCES

    preset = PRESETS.get(sequence)
    if (
        preset is None
        and ":" not in sequence
        and not set(re.split(r"[,+]", sequence)) <= set(SHIFTS)
    ):
        raise Seq2FinalError(
            f"unknown sequence '{sequence}'; valid: a preset ({', '.join(PRESETS)}) "
            f"or a spec of shift blocks ({', '.join(SHIFTS)}) such as 'rotation:corruption'"
        )
    dataset = dataset or (preset.dataset if preset else "digits")
    SOURCES[dataset]  # unknown names are answered with the valid list
    sizes = DEFAULT_SIZES.get(dataset, PAPER_SIZES)
    spec_text = preset.spec if preset else sequence
    if preset is not None and dataset != preset.dataset and dataset in DEFAULT_SIZES:
        # the paper's sizes do not fit a small dataset: keep the shifts, take its own sizes
        spec_text, preset = re.sub(r"\d+", "", spec_text), None
    natural = spec_text == NATURAL
    if natural != (dataset == "portraits"):
        raise Seq2FinalError(
            f"dataset '{dataset}' does not fit sequence '{sequence}'; valid: 'portraits' with "
            "sequence:portraits, any other dataset with shift sequences"
        )
    steps = () if natural else parse_spec(spec_text, sizes)
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
    )


# --------------------------------------------------------------------------------------------
# The built sequence
# --------------------------------------------------------------------------------------------


@dataclass
class Step:
    """One time step's arrays (``x_<split>``, ``y_<split>``, ``idx_<split>``, ``sub_<split>``)."""

    name: str
    arrays: dict[str, np.ndarray]

    def split(self, split: str) -> tuple[np.ndarray, np.ndarray]:
        """Images (N×3×H×W uint8) and labels of ``split`` (train, valid or test)."""
        if f"x_{split}" not in self.arrays:
            raise Seq2FinalError(f"step '{self.name}' has no {split} split; valid: {self.splits}")
        return self.arrays[f"x_{split}"], self.arrays[f"y_{split}"]

    @property
    def splits(self) -> list[str]:
        return [key[2:] for key in self.arrays if key.startswith("x_")]

    def content_hash(self) -> str:
        digest = hashlib.sha256()
        for key in sorted(self.arrays):
            array = np.ascontiguousarray(self.arrays[key])
            digest.update(f"{key}{array.dtype}{array.shape}".encode())
            digest.update(array.tobytes())
        return digest.hexdigest()


@dataclass
class ShiftSequence:
    """A built sequence: a manifest plus steps, held in memory or loaded lazily from a store.

    Later pipelines usually need one step at a time (the final step, or step t of a chain), so a
    stored sequence loads a step only when :meth:`step` asks for it.
    """

    manifest: dict[str, Any]
    _steps: dict[str, Step] = field(default_factory=dict)
    _loader: Callable[[str], Step] | None = None

    @classmethod
    def from_steps(
        cls,
        spec: SequenceSpec,
        source: SourceData,
        steps: list[Step],
        states: list[ShiftState | None],
        oracle: Step | None,
    ) -> ShiftSequence:
        named = {str(i): step for i, step in enumerate(steps)}
        if oracle is not None:
            named["oracle"] = oracle
        step_hashes = {name: step.content_hash() for name, step in named.items()}
        manifest = {
            "format": 1,
            "key": spec.key,
            "spec": spec.to_dict(),
            "source_fingerprint": source.fingerprint,
            "class_names": list(source.class_names),
            "subclass_names": [list(n) for n in source.subclass_names]
            if source.subclass_names
            else None,
            "steps": [
                {
                    "name": step.name,
                    "state": asdict(state) if state is not None else None,
                    "sizes": {s: int(len(step.arrays[f"y_{s}"])) for s in step.splits},
                }
                for step, state in zip(steps, states, strict=True)
            ],
            "has_oracle": oracle is not None,
            "step_hashes": step_hashes,
            "content_hash": hashlib.sha256("".join(step_hashes.values()).encode()).hexdigest(),
        }
        return cls(manifest, named)

    @property
    def key(self) -> str:
        return self.manifest["key"]

    @property
    def content_hash(self) -> str:
        return self.manifest["content_hash"]

    @property
    def num_steps(self) -> int:
        return len(self.manifest["steps"])

    @property
    def class_names(self) -> list[str]:
        return self.manifest["class_names"]

    @property
    def step_names(self) -> list[str]:
        return [s["name"] for s in self.manifest["steps"]]

    def step(self, index: int | str) -> Step:
        """Step ``index`` (0 = source, -1 = final) or ``"oracle"`` (the final step, oracle size)."""
        name = str(index % self.num_steps if isinstance(index, int) else index)
        if name not in self.manifest["step_hashes"]:
            raise Seq2FinalError(
                f"sequence '{self.key}' has no step '{index}'; valid: 0..{self.num_steps - 1}"
                + (", oracle" if self.manifest["has_oracle"] else "")
            )
        if name not in self._steps:
            assert self._loader is not None
            self._steps[name] = self._loader(name)
        return self._steps[name]

    def steps(self) -> Iterator[Step]:
        """Steps 0..T in order (the oracle variant excluded)."""
        return (self.step(i) for i in range(self.num_steps))


# --------------------------------------------------------------------------------------------
# Sampling
# --------------------------------------------------------------------------------------------


def split_counts(total: int, probs: tuple[float, ...] | list[float]) -> list[int]:
    """Split ``total`` over units: int(total·p) each, the last non-zero unit takes the remainder.

    Units after the last non-zero one get 0; the original gave them the remainder as well, which
    put unseen sub-populations into every sub-population step.
    """
    last = max(i for i, p in enumerate(probs) if p > 0)
    counts, used = [], 0
    for i, p in enumerate(probs):
        count = total - used if i == last else (int(total * p) if i < last else 0)
        counts.append(count)
        used += count
    return counts


@dataclass(frozen=True)
class _Unit:
    """A (class, sub-class) cell and how many images a step takes from it."""

    label: int
    sub: int | None
    train: int
    valid: int
    test: int


def plan_units(state: ShiftState, size: int, test_size: int) -> list[_Unit]:
    """How many train/valid/test images each (class, sub-class) gives at this step."""
    units = []
    for label, (n, n_test) in enumerate(
        zip(
            split_counts(size, state.class_probs),
            split_counts(test_size, state.class_probs),
            strict=True,
        )
    ):
        if state.subpop is None:
            parts = [(None, n, n_test)]
        else:
            parts = list(
                zip(
                    range(len(state.subpop)),
                    split_counts(n, state.subpop),
                    split_counts(n_test, state.subpop),
                    strict=True,
                )
            )
        for sub, count, count_test in parts:
            train = int(TRAIN_FRACTION * count)
            units.append(_Unit(label, sub, train, count - train, count_test))
    return units


class _Pools:
    """Indices of the source's train and test pools per (class, sub-class), in source order."""

    def __init__(self, source: SourceData) -> None:
        self.train = self._group(source.y_train, source.sub_train)
        self.test = self._group(source.y_test, source.sub_test)

    @staticmethod
    def _group(
        labels: np.ndarray, subs: np.ndarray | None
    ) -> dict[tuple[int, int | None], np.ndarray]:
        keys = labels if subs is None else labels * 1000 + subs
        groups: dict[tuple[int, int | None], np.ndarray] = {}
        for key in np.unique(keys):
            label, sub = (int(key), None) if subs is None else (int(key) // 1000, int(key) % 1000)
            groups[(label, sub)] = np.flatnonzero(keys == key)
        return groups

    def get(self, pool: str, label: int, sub: int | None) -> np.ndarray:
        return getattr(self, pool).get((label, sub), np.zeros(0, np.int64))


def _describe(source: SourceData, unit: _Unit) -> str:
    name = source.class_names[unit.label]
    if unit.sub is None:
        return f"class {unit.label} ('{name}')"
    assert source.subclass_names is not None
    return f"class {unit.label} ('{name}') sub-class {unit.sub} ('{source.subclass_names[unit.label][unit.sub]}')"


def check_feasible(
    spec: SequenceSpec, source: SourceData, pools: _Pools, states: list[ShiftState]
) -> None:
    """Refuse, before any sampling, a step that asks a class for more images than its pool has,
    or one so small that its train or valid split would be empty."""
    for index, (step, state) in enumerate(zip(spec.steps, states, strict=True)):
        final = index == spec.num_targets
        variants = [(step.size, "")] + (
            [(spec.oracle_size, " (oracle)")] if final and spec.oracle_size else []
        )
        for size, label in variants:
            units = plan_units(state, size, spec.test_size if final else 0)
            for split in ("train", "valid") + (("test",) if final else ()):
                if sum(getattr(unit, split) for unit in units) == 0:
                    raise Seq2FinalError(
                        f"sequence '{spec.name}' step {index}{label} (size {size}) leaves its "
                        f"{split} split empty; valid: sizes that give every split an image"
                    )
            for unit in units:
                have = len(pools.get("train", unit.label, unit.sub))
                have_test = len(pools.get("test", unit.label, unit.sub))
                if unit.train + unit.valid > have or unit.test > have_test:
                    split, need, pool = (
                        ("train+valid", unit.train + unit.valid, have)
                        if unit.train + unit.valid > have
                        else ("test", unit.test, have_test)
                    )
                    raise Seq2FinalError(
                        f"sequence '{spec.name}' step {index}{label} (size {size}, test "
                        f"{spec.test_size}) needs {need} {split} images of {_describe(source, unit)} "
                        f"but dataset '{source.name}' has {pool}; valid: smaller sizes"
                    )


def shift_states(spec: SequenceSpec, source: SourceData) -> list[ShiftState]:
    """The cumulative shift state of every step (raises on impossible block combinations).

    A source with sub-classes is always sampled by sub-class, as the original did for CIFAR-100:
    the source proportions (½, ½, 0, 0, 0) hold until a ``subpop`` step changes them.
    """
    with_subpopulations = source.sub_train is not None
    state = ShiftState.source(source.num_classes, with_subpopulations=with_subpopulations)
    states = [state]
    for step in spec.steps[1:]:
        state = advance(state, step.blocks)
        states.append(state)
    return states


def _sample_step(
    source: SourceData,
    pools: _Pools,
    state: ShiftState,
    size: int,
    test_size: int,
    seed: int,
    name: str,
) -> Step:
    """Draw one step in the original random-number order, then apply its shift state."""
    rng = np.random.RandomState(seed)
    units = plan_units(state, size, test_size)
    picked: dict[str, list[np.ndarray]] = {"train": [], "valid": [], "test": []}
    for unit in units:
        candidates = pools.get("train", unit.label, unit.sub).copy()
        rng.shuffle(candidates)
        picked["train"].append(candidates[: unit.train])
        picked["valid"].append(candidates[unit.train : unit.train + unit.valid])
        if test_size:
            test_candidates = pools.get("test", unit.label, unit.sub).copy()
            rng.shuffle(test_candidates)
            picked["test"].append(test_candidates[: unit.test])
    splits = ["train", "valid"] + (["test"] if test_size else [])
    indices = {}
    for split in splits:
        chosen = np.concatenate(picked[split]).astype(np.int64)
        order = np.arange(len(chosen))
        rng.shuffle(order)
        indices[split] = chosen[order]
    raw = []
    for split in splits:
        pool = "test" if split == "test" else "train"
        x = source.x_test if pool == "test" else source.x_train
        y = source.y_test if pool == "test" else source.y_train
        raw.append((x[indices[split]], y[indices[split]]))
    arrays: dict[str, np.ndarray] = {}
    for split, (x, y) in zip(splits, apply_state(raw, state, rng), strict=True):
        arrays[f"x_{split}"], arrays[f"y_{split}"] = x, y
        arrays[f"idx_{split}"] = indices[split]
        sub = source.sub_test if split == "test" else source.sub_train
        if sub is not None:
            arrays[f"sub_{split}"] = sub[indices[split]]
    return Step(name, arrays)


def _build_natural(spec: SequenceSpec, source: SourceData) -> ShiftSequence:
    """Split a source that is a sequence by itself (Portraits) per natural time step.

    Each period is shuffled with one seeded generator, in period order; earlier periods split
    80/20 into train/valid, the final period 40/10/50 into train/valid/test.
    """
    assert source.time_train is not None and source.time_names is not None
    rng = np.random.RandomState(spec.seed)
    steps = []
    periods = [t for t in range(len(source.time_names)) if np.any(source.time_train == t)]
    for position, period in enumerate(periods):
        order = np.flatnonzero(source.time_train == period)
        rng.shuffle(order)
        n = len(order)
        if position < len(periods) - 1:
            cuts = [int(TRAIN_FRACTION * n), n]
        else:
            cuts = [int(PORTRAITS_FINAL_SPLIT[0] * n), int(PORTRAITS_FINAL_SPLIT[1] * n), n]
        arrays, start = {}, 0
        for split, stop in zip(("train", "valid", "test"), cuts, strict=False):
            chosen = order[start:stop]
            arrays[f"x_{split}"] = source.x_train[chosen]
            arrays[f"y_{split}"] = source.y_train[chosen]
            arrays[f"idx_{split}"] = chosen.astype(np.int64)
            start = stop
        steps.append(Step(source.time_names[period], arrays))
    if len(steps) < 2:
        raise Seq2FinalError(
            f"dataset '{source.name}' has {len(steps)} time period(s) with images; valid: at least 2"
        )
    return ShiftSequence.from_steps(spec, source, steps, [None] * len(steps), None)


def build_sequence(spec: SequenceSpec, source: SourceData) -> ShiftSequence:
    """Sample every step of ``spec`` from ``source`` (and the oracle variant of the final step)."""
    if spec.natural:
        return _build_natural(spec, source)
    if any("subpop" in step.blocks for step in spec.steps):
        source = source.with_subpopulations()
    states = shift_states(spec, source)
    pools = _Pools(source)
    check_feasible(spec, source, pools, states)
    seeds = spec.step_seeds()
    steps = []
    for index, (step, state, seed) in enumerate(zip(spec.steps, states, seeds, strict=True)):
        final = index == spec.num_targets
        name = "source" if index == 0 else "+".join(step.blocks)
        steps.append(
            _sample_step(
                source, pools, state, step.size, spec.test_size if final else 0, seed, name
            )
        )
    oracle = None
    if spec.oracle_size:
        oracle = _sample_step(
            source, pools, states[-1], spec.oracle_size, spec.test_size, seeds[-1], "oracle"
        )
    return ShiftSequence.from_steps(spec, source, steps, list(states), oracle)
