"""Sampling a sequence: every step drawn afresh from the source pools, then shifted.

Per class (and per sub-class) the draw is split 80/20 into train and valid with a floor, exactly
as the original benchmark samples, including its random-number order. The sub-population
sampler's over-filling bug is not kept: a sub-class with proportion 0 gets no images.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from seq2final.core.errors import Seq2FinalError
from seq2final.core.seeds import derived_seed
from seq2final.data.effects import CLASS_WEIGHTS, SUBPOPULATIONS, SUPPORT, ShiftState
from seq2final.data.sequence import ShiftSequence, Step
from seq2final.data.shifts import advance
from seq2final.data.sources import SourceData, with_subpopulations
from seq2final.data.spec import TRAIN_FRACTION, SequenceSpec
from seq2final.data.support import BALL_BLOCKS, CAP_BLOCKS, SupportSpace

PORTRAITS_FINAL_SPLIT = (0.4, 0.5)  # cumulative: train 40 %, valid 10 %, test 50 %
NATURAL_STEP_TEST = 0.1  # under a temporal protocol: every period's held-out test share


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


def plan_units(
    state: ShiftState, size: int, test_size: int, train_fraction: float = TRAIN_FRACTION
) -> list[_Unit]:
    """How many train/valid/test images each (class, sub-class) gives at this step."""
    class_weights = state[CLASS_WEIGHTS].weights
    subpopulations = state[SUBPOPULATIONS].weights
    units = []
    for label, (n, n_test) in enumerate(
        zip(
            split_counts(size, class_weights),
            split_counts(test_size, class_weights),
            strict=True,
        )
    ):
        if subpopulations is None:
            parts: list[tuple[int | None, int, int]] = [(None, n, n_test)]
        else:
            parts = list(
                zip(
                    range(len(subpopulations)),
                    split_counts(n, subpopulations),
                    split_counts(n_test, subpopulations),
                    strict=True,
                )
            )
        for sub, count, count_test in parts:
            train = int(train_fraction * count)
            units.append(_Unit(label, sub, train, count - train, count_test))
    return units


class _Pools:
    """Indices of the source's train and test pools per (class, sub-class), in source order;
    with a support space, only those inside a step's support (:mod:`seq2final.data.support`)."""

    def __init__(self, source: SourceData, space: SupportSpace | None = None) -> None:
        self.train = self._group(source.y_train, source.sub_train)
        self.test = self._group(source.y_test, source.sub_test)
        self.space = space

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

    def get(self, pool: str, label: int, sub: int | None, state: ShiftState) -> np.ndarray:
        indices = getattr(self, pool).get((label, sub), np.zeros(0, np.int64))
        if self.space is None:
            return indices
        return indices[self.space.inside(pool, indices, state[SUPPORT])]


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
        tested = final or spec.step_tests
        variants = [(step.size, "")] + (
            [(spec.oracle_size, " (oracle)")] if final and spec.oracle_size else []
        )
        for size, label in variants:
            units = plan_units(state, size, spec.test_size if tested else 0, spec.train_fraction)
            for split in ("train", "valid") + (("test",) if tested else ()):
                if sum(getattr(unit, split) for unit in units) == 0:
                    raise Seq2FinalError(
                        f"sequence '{spec.name}' step {index}{label} (size {size}) leaves its "
                        f"{split} split empty; valid: sizes that give every split an image"
                    )
            for unit in units:
                have = len(pools.get("train", unit.label, unit.sub, state))
                have_test = len(pools.get("test", unit.label, unit.sub, state))
                if unit.train + unit.valid > have or unit.test > have_test:
                    split, need, pool = (
                        ("train+valid", unit.train + unit.valid, have)
                        if unit.train + unit.valid > have
                        else ("test", unit.test, have_test)
                    )
                    where = (
                        ""
                        if pools.space is None
                        else f" inside the step's support {state[SUPPORT]}"
                    )
                    raise Seq2FinalError(
                        f"sequence '{spec.name}' step {index}{label} (size {size}, test "
                        f"{spec.test_size}) needs {need} {split} images of {_describe(source, unit)} "
                        f"but dataset '{source.name}' has {pool}{where}; valid: smaller sizes"
                        + ("" if pools.space is None else " or a wider support")
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
    train_fraction: float = TRAIN_FRACTION,
) -> Step:
    """Draw one step in the original random-number order, then apply its shift state."""
    rng = np.random.RandomState(seed)
    units = plan_units(state, size, test_size, train_fraction)
    picked: dict[str, list[np.ndarray]] = {"train": [], "valid": [], "test": []}
    for unit in units:
        candidates = pools.get("train", unit.label, unit.sub, state).copy()
        rng.shuffle(candidates)
        picked["train"].append(candidates[: unit.train])
        picked["valid"].append(candidates[unit.train : unit.train + unit.valid])
        if test_size:
            test_candidates = pools.get("test", unit.label, unit.sub, state).copy()
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
    for split, (x, y) in zip(splits, state.apply(raw, rng), strict=True):
        arrays[f"x_{split}"], arrays[f"y_{split}"] = x, y
        arrays[f"idx_{split}"] = indices[split]
        sub = source.sub_test if split == "test" else source.sub_train
        if sub is not None:
            arrays[f"sub_{split}"] = sub[indices[split]]
    return Step(name, arrays)


def _sample_test(
    source: SourceData, pools: _Pools, state: ShiftState, test_size: int, seed: int
) -> dict[str, np.ndarray]:
    """A test split for a step that the paper's protocol never tests (the temporal protocols
    test every step): drawn from the source's test pool per class as the final step's is, with a
    generator of its own, so the step's train and valid images are those it has without one."""
    rng = np.random.RandomState(derived_seed(seed, "test"))
    chosen = []
    for unit in plan_units(state, 0, test_size):
        candidates = pools.get("test", unit.label, unit.sub, state).copy()
        rng.shuffle(candidates)
        chosen.append(candidates[: unit.test])
    indices = np.concatenate(chosen).astype(np.int64)
    indices = indices[rng.permutation(len(indices))]
    ((x, y),) = state.apply([(source.x_test[indices], source.y_test[indices])], rng)
    arrays = {"x_test": x, "y_test": y, "idx_test": indices}
    if source.sub_test is not None:
        arrays["sub_test"] = source.sub_test[indices]
    return arrays


def _by_group(rows: np.ndarray, groups: np.ndarray, rng: np.random.RandomState) -> np.ndarray:
    """``rows`` reordered group by group, the groups in a seeded order (each group's rows in the
    order they came)."""
    names = np.unique(groups[rows])
    rng.shuffle(names)
    return np.concatenate([rows[groups[rows] == name] for name in names]) if len(rows) else rows


def _group_cuts(groups: np.ndarray, cuts: list[int], labelled: int | None = None) -> list[int]:
    """``cuts`` moved forward to group boundaries of ``groups`` (in row order), so that no group
    is split between two splits. With ``labelled`` (the scarce final images asked for) the
    labelled cut moves back instead, never past it: a group that would take the final period
    over what adaptation may use goes to the test split whole."""
    ends = np.flatnonzero(np.r_[groups[1:] != groups[:-1], True]) + 1
    moved = [int(ends[np.searchsorted(ends, cut)]) if cut else 0 for cut in cuts]
    if labelled is not None:
        within = ends[ends <= labelled]
        last = int(within[-1]) if len(within) else 0
        moved = [min(moved[0], last), last, *moved[2:]]
    if len(moved) > 1 and moved[0] >= moved[1]:  # the train cut took every group: one goes back
        before = ends[ends < moved[1]]  # to validate, where there is a group to spare
        if len(before) and before[-1] > 0:
            moved[0] = int(before[-1])
    return moved


def _period_cuts(
    spec: SequenceSpec, source: SourceData, period: int, order: np.ndarray, free: np.ndarray,
    final: bool,
) -> list[int]:  # fmt: skip
    """Where the seeded rule cuts a period's ``free`` images (those no split column places)
    into train, valid and test (:func:`_build_natural` says the shares), at group ends."""
    assert source.time_names is not None
    given, n, name = source.split_train, len(free), source.time_names[period]
    if spec.step_tests:
        kept = n - int(NATURAL_STEP_TEST * n)
        cuts = [int(spec.train_fraction * kept), kept, n]
    elif final and source.final_labelled is not None:
        told = 0 if given is None else int(np.isin(given[order], (1, 2)).sum())
        if told > source.final_labelled:  # a split column's train and valid images count
            raise Seq2FinalError(
                f"dataset '{source.name}': its split column sends {told} images of the final "
                f"period {name} to train or valid, more than "
                f"data_options.final_labelled {source.final_labelled}; valid: at most that many"
            )
        labelled = min(source.final_labelled - told, n)  # the scarce final data, the rest tests
        cuts = [int(spec.train_fraction * labelled), labelled, n]
    elif not final:
        cuts = [int(spec.train_fraction * n), n]
    else:
        cuts = [int(PORTRAITS_FINAL_SPLIT[0] * n), int(PORTRAITS_FINAL_SPLIT[1] * n), n]
    if source.group_train is None:
        return cuts
    scarce = final and not spec.step_tests and source.final_labelled is not None
    cuts = _group_cuts(source.group_train[free], cuts, source.final_labelled if scarce else None)
    if scarce and not cuts[1]:
        first = int(np.sum(source.group_train[free] == source.group_train[free[0]]))
        raise Seq2FinalError(
            f"dataset '{source.name}': the final period {name}'s first group (seeded order) "
            f"holds {first} images, more than data_options.final_labelled "
            f"{source.final_labelled}; valid: final_labelled at least {first}, or smaller groups"
        )
    return cuts


def _period_arrays(
    source: SourceData, order: np.ndarray, free: np.ndarray, cuts: list[int]
) -> dict[str, np.ndarray]:
    """A period's splits: the free images between the cuts, with those a split column sends to
    each (an earlier period's test images too: never trained on)."""
    given = source.split_train
    arrays, start = {}, 0
    for code, split in enumerate(("train", "valid", "test")):
        stop = cuts[code] if code < len(cuts) else start
        chosen = free[start:stop]
        if given is not None:
            told = order[given[order] == code + 1]
            if code >= len(cuts) and not len(told):
                continue
            chosen = np.sort(np.concatenate([chosen, told]))
        elif code >= len(cuts):
            continue
        arrays[f"x_{split}"] = source.x_train[chosen]
        arrays[f"y_{split}"] = source.y_train[chosen]
        arrays[f"idx_{split}"] = chosen.astype(np.int64)
        start = stop
    return arrays


def _check_period(
    source: SourceData, period: int, arrays: dict[str, np.ndarray], final: bool, n: int
) -> None:
    """A period a fit can use: the final one keeps images to test, every one train and valid
    images (said here, before anything trains)."""
    assert source.time_names is not None
    name = source.time_names[period]
    if final and not len(arrays.get("y_test", ())):
        raise Seq2FinalError(
            f"dataset '{source.name}': the final period {name} has no image left to test on "
            "(its split column sends every one to train or valid); valid: leave some of the "
            "final period's images to test"
        )
    empty = [split for split in ("train", "valid") if not len(arrays.get(f"y_{split}", ()))]
    if empty:
        raise Seq2FinalError(
            f"dataset '{source.name}': period {name} has no {' and no '.join(empty)} images "
            f"once split ({n} to split"
            + (", in whole groups" if source.group_train is not None else "")
            + "); valid: more images in the period, smaller groups, or a larger "
            "data_options.final_labelled"
        )


def _build_natural(spec: SequenceSpec, source: SourceData) -> ShiftSequence:
    """Split a source that is a sequence by itself (Portraits) per natural time step.

    Each period is shuffled with one seeded generator, in period order; earlier periods split
    80/20 into train/valid, the final period 40/10/50 into train/valid/test. With
    ``step_tests`` (the temporal protocols) every period holds out a tenth as its test split, as
    Wild-Time holds out a tenth of each Yearbook year, and splits the rest ``train_fraction`` /
    the remainder into train/valid. A source's ``final_labelled`` sets how many final images
    train and validate (the rest test), and its ``split_train`` sends images to the split it
    names; the seeded rule splits the others, keeping each of its ``group_train`` groups whole
    (a cut moves on to the end of the group it falls in).
    """
    assert source.time_train is not None and source.time_names is not None
    rng = np.random.RandomState(spec.seed)
    steps = []
    periods = [t for t in range(len(source.time_names)) if np.any(source.time_train == t)]
    given = source.split_train
    for position, period in enumerate(periods):
        order = np.flatnonzero(source.time_train == period)
        rng.shuffle(order)
        free = order if given is None else order[given[order] == 0]
        if source.group_train is not None:  # whole groups, in a seeded order, never split
            free = _by_group(free, source.group_train, rng)
        final = position == len(periods) - 1
        cuts = _period_cuts(spec, source, period, order, free, final)
        arrays = _period_arrays(source, order, free, cuts)
        _check_period(source, period, arrays, final, len(free))
        steps.append(Step(source.time_names[period], arrays))
    if len(steps) < 2:
        raise Seq2FinalError(
            f"dataset '{source.name}' has {len(steps)} time period(s) with images; valid: at least 2"
        )
    if spec.steps and len(steps) != len(spec.steps):
        raise Seq2FinalError(
            f"dataset '{source.name}' has images in {len(steps)} of its {len(spec.steps)} time "
            "periods; valid: a folder with images in every period (its protocols count on them)"
        )
    return ShiftSequence.from_steps(spec, source, steps, [None] * len(steps), None)


def build_sequence(spec: SequenceSpec, source: SourceData) -> ShiftSequence:
    """Sample every step of ``spec`` from ``source`` (and the oracle variant of the final step)."""
    if spec.natural:
        return _build_natural(spec, source)
    if any("subpop" in step.names for step in spec.steps):
        source = with_subpopulations(source)
    states = shift_states(spec, source)
    space = support_space(spec, source)
    pools = _Pools(source, space)
    check_feasible(spec, source, pools, states)
    seeds = spec.step_seeds()
    steps = []
    for index, (step, state, seed) in enumerate(zip(spec.steps, states, seeds, strict=True)):
        final = index == spec.num_targets
        name = "source" if index == 0 else "+".join(step.blocks)
        drawn = _sample_step(
            source, pools, state, step.size, spec.test_size if final else 0, seed, name,
            spec.train_fraction,
        )  # fmt: skip
        if spec.step_tests and not final:
            drawn.arrays.update(_sample_test(source, pools, state, spec.test_size, seed))
        steps.append(drawn)
    oracle = None
    if spec.oracle_size:
        oracle = _sample_step(
            source, pools, states[-1], spec.oracle_size, spec.test_size, seeds[-1], "oracle",
            spec.train_fraction,
        )  # fmt: skip
    notes = None
    if space is not None:  # the selection is exact: each step's intensity is counted
        notes = [{"support_intensity": space.intensity(state[SUPPORT])} for state in states]
        # and the final step's against every historical step's support, which a model trained
        # on steps 0..T−1 has seen (Control+Shift's I of the model's real training support)
        seen = [state[SUPPORT] for state in states[:-1]]
        notes[-1]["history_support_intensity"] = space.intensity(states[-1][SUPPORT], seen)
    return ShiftSequence.from_steps(spec, source, steps, list(states), oracle, notes)


def support_space(spec: SequenceSpec, source: SourceData) -> SupportSpace | None:
    """The selection space of a sequence with support blocks (none for any other, whose pools
    stay whole and whose draws stay byte for byte as before)."""
    names = {name for step in spec.steps for name in step.names}
    caps, ball = bool(names & set(CAP_BLOCKS)), bool(names & set(BALL_BLOCKS))
    return SupportSpace.of_source(source, spec.seed, caps, ball) if caps or ball else None
