"""Shift building blocks: each advances one effect of the cumulative shift state by one step.

A sequence step names one or more blocks (``rotation``, ``corruption,label_flip``, ...). Each block
is a pure function of the effect's value so far (and the class count) returning its next value;
:mod:`seq2final.data.effects` says what each effect does to freshly drawn images. Adding a block is
one function decorated with :func:`shift_block`; a block that needs a new kind of change registers
that effect first.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from seq2final.core.errors import Seq2FinalError
from seq2final.core.registry import Registry
from seq2final.data.effects import (
    CLASS_WEIGHTS,
    FLIP_PLUS_TWO,
    FLIP_REVERSE,
    SUBPOPULATIONS,
    ShiftState,
    Weights,
)
from seq2final.data.sources import sources_with_subpopulations

ROTATION_STEP_DEGREES = 30.0
TINT_STEP = 30
LABEL_SHIFT_TOTAL = 0.3
NUM_SUBPOPULATIONS = 5

Advance = Callable[[Any, int], Any]
"""``(effect value so far, number of classes) -> effect value after one more step``."""


@dataclass(frozen=True)
class ShiftBlock:
    """One step's worth of one effect; calling it on a state returns the advanced state."""

    effect: str
    advance: Advance

    @property
    def description(self) -> str:
        return ((self.advance.__doc__ or "").strip().splitlines() or [""])[0]

    def __call__(self, state: ShiftState) -> ShiftState:
        return state.with_value(self.effect, self.advance(state[self.effect], state.num_classes))


SHIFTS: Registry[ShiftBlock] = Registry("shift block")


def shift_block(name: str, effect: str) -> Callable[[Advance], Advance]:
    """Register the decorated function as block ``name``, advancing ``effect``."""

    def register(advance: Advance) -> Advance:
        SHIFTS.add(name, ShiftBlock(effect, advance))
        return advance

    return register


def advance(state: ShiftState, blocks: Sequence[str]) -> ShiftState:
    """The state after one step made of ``blocks`` (applied in the order given)."""
    for name in blocks:
        state = SHIFTS[name](state)
    return state


@shift_block("corruption", "noise")
def corruption(applications: int, num_classes: int) -> int:
    """One more application of uniform integer noise in {-3..2} per pixel and channel."""
    return applications + 1


@shift_block("rotation", "rotation")
def rotation(angles: tuple[float, ...], num_classes: int) -> tuple[float, ...]:
    """Every class turns 30° further counter-clockwise."""
    return tuple(a + ROTATION_STEP_DEGREES for a in angles)


@shift_block("rotation_cond", "rotation")
def rotation_cond(angles: tuple[float, ...], num_classes: int) -> tuple[float, ...]:
    """Even classes turn 30° counter-clockwise, odd classes 30° clockwise."""
    return tuple(
        a + (ROTATION_STEP_DEGREES if c % 2 == 0 else -ROTATION_STEP_DEGREES)
        for c, a in enumerate(angles)
    )


Tints = tuple[tuple[int, int, int], ...]


@shift_block("recolor", "tint")
def recolor(tints: Tints, num_classes: int) -> Tints:
    """Every class gets 30 more on the red channel."""
    return tuple((r + TINT_STEP, g, b) for r, g, b in tints)


@shift_block("recolor_cond", "tint")
def recolor_cond(tints: Tints, num_classes: int) -> Tints:
    """Class c gets 30 more on channel c mod 3 (R, G, B)."""
    shifted = []
    for c, tint in enumerate(tints):
        channels = list(tint)
        channels[c % 3] += TINT_STEP
        shifted.append((channels[0], channels[1], channels[2]))
    return tuple(shifted)


@shift_block("label_flip", "label_flips")
def label_flip(flips: tuple[int, ...], num_classes: int) -> tuple[int, ...]:
    """Append a flip, alternating y → C−1−y and y → (y+2) mod C, starting with the first."""
    return (*flips, FLIP_REVERSE if len(flips) % 2 == 0 else FLIP_PLUS_TWO)


@shift_block("label_shift", CLASS_WEIGHTS)
def label_shift(weights: Weights, num_classes: int) -> Weights:
    """Move 0.3/C of sampling probability from every even class to every odd class."""
    assert weights.weights is not None
    delta = LABEL_SHIFT_TOTAL / num_classes
    probs = tuple(p - delta if c % 2 == 0 else p + delta for c, p in enumerate(weights.weights))
    step = weights.steps + 1
    if min(probs) < -1e-12:
        raise Seq2FinalError(
            f"label_shift step {step} would make an even class's probability negative; "
            f"valid: at most {int(1 / LABEL_SHIFT_TOTAL)} label_shift steps"
        )
    return Weights(tuple(max(p, 0.0) for p in probs), step)


@shift_block("subpop", SUBPOPULATIONS)
def subpop(proportions: Weights, num_classes: int) -> Weights:
    """Bring in the next sub-class and (from the second step on) drop the oldest.

    Source {0,1} → {0,1,2} → {1,2,3} → {2,3,4}: the final step shares no sub-class with the source.
    """
    if proportions.weights is None:
        raise Seq2FinalError(
            "'subpop' needs a dataset with sub-classes; "
            f"valid: {', '.join(sources_with_subpopulations())}"
        )
    step = proportions.steps + 1
    first, last = max(0, step - 1), step + 1
    if last >= NUM_SUBPOPULATIONS:
        raise Seq2FinalError(
            f"subpop step {step} has no new sub-class left; valid: at most "
            f"{NUM_SUBPOPULATIONS - 2} subpop steps"
        )
    share = 1.0 / (last - first + 1)
    return Weights(
        tuple(share if first <= s <= last else 0.0 for s in range(NUM_SUBPOPULATIONS)), step
    )
