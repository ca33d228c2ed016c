"""Shift building blocks: each advances one effect of the cumulative shift state by one step.

A sequence step names one or more blocks (``rotation``, ``corruption,label_flip``, ...). Each block
is a pure function of the effect's value so far (and the class count) returning its next value;
:mod:`seq2final.data.effects` says what each effect does to freshly drawn images. Adding a block is
one function decorated with :func:`shift_block`; a block that needs a new kind of change registers
that effect first.

A block with a :class:`Dial` takes an intensity, written ``rotation@15`` (15° a step): how much
of its change one step makes, as Control+Shift turns a shift up and down (docs/intensity.md). The
dial's default is the paper's step, so ``rotation`` and ``rotation@30`` draw the same bytes, and
intensity 0 changes nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from seq2final.core.errors import Seq2FinalError
from seq2final.core.registry import Registry
from seq2final.data.effects import (
    CLASS_WEIGHTS,
    FLIP_PLUS_TWO,
    FLIP_REVERSE,
    SUBPOPULATIONS,
    SUPPORT,
    Flips,
    ShiftState,
    Support,
    Weights,
)
from seq2final.data.sources import sources_with_subpopulations

ROTATION_STEP_DEGREES = 30.0
TINT_STEP = 30
LABEL_SHIFT_TOTAL = 0.3
NUM_SUBPOPULATIONS = 5

Advance = Callable[..., Any]
"""``(effect value so far, number of classes) -> effect value after one more step``; a block with
a dial also takes ``intensity`` (its dial's value for this step)."""

INTENSITY_MARK = "@"


@dataclass(frozen=True)
class Dial:
    """What a block's intensity means and which values it takes (``low`` and ``high`` included).

    ``default`` is the paper's step, used when a spec names the block without ``@``.
    """

    unit: str
    default: float
    low: float
    high: float
    integer: bool = False

    def check(self, block: str, value: float) -> None:
        """Refuse, in one line, an intensity outside the dial's range (or not whole where it
        counts something)."""
        whole = " whole" if self.integer else ""
        if not self.low <= value <= self.high or (self.integer and value != int(value)):
            raise Seq2FinalError(
                f"intensity {value:g} of shift block '{block}' ({self.unit}): valid:{whole} "
                f"values from {self.low:g} to {self.high:g}"
            )


@dataclass(frozen=True)
class ShiftBlock:
    """One step's worth of one effect; calling it on a state returns the advanced state."""

    effect: str
    advance: Advance
    dial: Dial | None = None

    @property
    def description(self) -> str:
        return ((self.advance.__doc__ or "").strip().splitlines() or [""])[0]

    def __call__(self, state: ShiftState, intensity: float | None = None) -> ShiftState:
        value = state[self.effect]
        if self.dial is None:
            return state.with_value(self.effect, self.advance(value, state.num_classes))
        dial = self.dial.default if intensity is None else intensity
        turned = int(dial) if self.dial.integer else float(dial)
        return state.with_value(self.effect, self.advance(value, state.num_classes, turned))


SHIFTS: Registry[ShiftBlock] = Registry("shift block")


def shift_block(name: str, effect: str, dial: Dial | None = None) -> Callable[[Advance], Advance]:
    """Register the decorated function as block ``name``, advancing ``effect``; with a ``dial``
    it also takes the step's intensity."""

    def register(advance: Advance) -> Advance:
        SHIFTS.add(name, ShiftBlock(effect, advance, dial))
        return advance

    return register


_NUMBER = re.compile(r"-?(0|[1-9]\d*)(\.\d*[1-9])?")


def split_block(text: str) -> tuple[str, float | None]:
    """``"rotation@15"`` → ``("rotation", 15.0)``; a block without ``@`` has no intensity.

    The number must be written the shortest way (``15``, ``0.2``, not ``15.0``, ``0.20`` or
    ``-0``): one intensity, one spelling, so one key; and a size run into an intensity without
    its ``/`` (``label_flip@0.2300``) is refused rather than read as ``0.23``.
    """
    name, mark, value = text.partition(INTENSITY_MARK)
    if not mark:
        return name, None
    if not _NUMBER.fullmatch(value) or value == "-0":
        raise Seq2FinalError(
            f"shift block '{text}': the intensity after '@' is not a number written the "
            f"shortest way; valid: e.g. '{name}@0.5' or '{name}@15' (a size follows '/')"
        )
    return name, float(value)


def intensity_text(value: float) -> str:
    """How a spec writes ``value`` after ``@``: the shortest way, never in exponent form."""
    text = np.format_float_positional(float(value), trim="-")
    return "0" if text == "-0" else text


def check_block(text: str) -> str:
    """Refuse an unknown block, an intensity on a block without a dial, or one outside its
    range, each in one line; return the block's name."""
    name, intensity = split_block(text)
    block = SHIFTS[name]  # an unknown name is answered with the valid ones
    if intensity is not None:
        if block.dial is None:
            dialled = [n for n, b in SHIFTS.items() if b.dial is not None]
            raise Seq2FinalError(
                f"shift block '{name}' has no intensity ('{text}'); valid: '{name}' alone, or an "
                f"intensity on {', '.join(dialled)}"
            )
        block.dial.check(name, intensity)
    return name


def advance(state: ShiftState, blocks: Sequence[str]) -> ShiftState:
    """The state after one step made of ``blocks`` (applied in the order given)."""
    for text in blocks:
        name, intensity = split_block(text)
        state = SHIFTS[name](state, intensity)
    return state


DEGREES = Dial("degrees per step", ROTATION_STEP_DEGREES, -180.0, 180.0)
TINT = Dial("added to a channel per step", TINT_STEP, -255, 255, integer=True)


@shift_block("corruption", "noise", Dial("noise applications per step", 1, 0, 20, integer=True))
def corruption(applications: int, num_classes: int, intensity: int) -> int:
    """One more application of uniform integer noise in {-3..2} per pixel and channel."""
    return applications + intensity


@shift_block("rotation", "rotation", DEGREES)
def rotation(angles: tuple[float, ...], num_classes: int, intensity: float) -> tuple[float, ...]:
    """Every class turns 30° further counter-clockwise."""
    return tuple(a + intensity for a in angles)


@shift_block("rotation_cond", "rotation", DEGREES)
def rotation_cond(
    angles: tuple[float, ...], num_classes: int, intensity: float
) -> tuple[float, ...]:
    """Even classes turn 30° counter-clockwise, odd classes 30° clockwise."""
    return tuple(a + (intensity if c % 2 == 0 else -intensity) for c, a in enumerate(angles))


Tints = tuple[tuple[int, int, int], ...]


@shift_block("recolor", "tint", TINT)
def recolor(tints: Tints, num_classes: int, intensity: int) -> Tints:
    """Every class gets 30 more on the red channel."""
    return tuple((r + intensity, g, b) for r, g, b in tints)


@shift_block("recolor_cond", "tint", TINT)
def recolor_cond(tints: Tints, num_classes: int, intensity: int) -> Tints:
    """Class c gets 30 more on channel c mod 3 (R, G, B)."""
    shifted = []
    for c, tint in enumerate(tints):
        channels = list(tint)
        channels[c % 3] += intensity
        shifted.append((channels[0], channels[1], channels[2]))
    return tuple(shifted)


@shift_block("label_flip", "label_flips", Dial("share of each class flipped", 1.0, 0.0, 1.0))
def label_flip(flips: Flips, num_classes: int, intensity: float) -> Flips:
    """Append a flip, alternating y → C−1−y and y → (y+2) mod C, starting with the first.

    At an intensity below 1 the flip moves only that share of each class's labels (the first of
    each class in a split's drawn order, which is random; docs/intensity.md); at 0 none.
    """
    if intensity == 0.0:  # no label moves: the flip is not added, nor does the alternation
        return flips
    kind = FLIP_REVERSE if len(flips) % 2 == 0 else FLIP_PLUS_TWO
    return (*flips, kind if intensity == 1.0 else (kind, intensity))


@shift_block(
    "label_shift",
    CLASS_WEIGHTS,
    Dial("sampling probability moved per step", LABEL_SHIFT_TOTAL, 0.0, 1.0),
)
def label_shift(weights: Weights, num_classes: int, intensity: float) -> Weights:
    """Move 0.3/C of sampling probability from every even class to every odd class."""
    assert weights.weights is not None
    delta = intensity / num_classes
    probs = tuple(p - delta if c % 2 == 0 else p + delta for c, p in enumerate(weights.weights))
    step = weights.steps + 1
    if min(probs) < -1e-12:
        raise Seq2FinalError(
            f"label_shift step {step} would make an even class's probability negative; "
            f"valid: at most {int(1 / intensity)} label_shift steps of {intensity:g}"
        )
    return Weights(tuple(max(p, 0.0) for p in probs), step)


@shift_block(
    "subpop", SUBPOPULATIONS, Dial("share of the way to the next window per step", 1.0, 0.0, 1.0)
)
def subpop(proportions: Weights, num_classes: int, intensity: float) -> Weights:
    """Bring in the next sub-class and (from the second step on) drop the oldest.

    Source {0,1} → {0,1,2} → {1,2,3} → {2,3,4}: the final step shares no sub-class with the source.
    At an intensity below 1 the step moves only that share of the way from the proportions so far
    to the next window's.
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
    window = tuple(share if first <= s <= last else 0.0 for s in range(NUM_SUBPOPULATIONS))
    if intensity == 1.0:
        return Weights(window, step)
    mixed = (
        (1.0 - intensity) * old + intensity * new
        for old, new in zip(proportions.weights, window, strict=True)
    )
    return Weights(tuple(mixed), step)


@shift_block(
    "overlap", SUPPORT, Dial("degrees the support's cap turns per step", 30.0, -180.0, 180.0)
)
def overlap(support: Support, num_classes: int, intensity: float) -> Support:
    """The support's hemisphere turns 30° further (Control+Shift's overlap shift)."""
    return support._replace(turn=support.turn + intensity)


@shift_block("extend", SUPPORT, Dial("degrees the support's cap widens per step", 30.0, 0.0, 90.0))
def extend(support: Support, num_classes: int, intensity: float) -> Support:
    """The support's cap widens by 30° beyond its hemisphere (Control+Shift's extend shift)."""
    widen = support.widen + intensity
    if widen > 90.0:
        raise Seq2FinalError(
            f"extend would widen the support's cap by {widen:g}° in all; valid: at most 90° "
            "(the whole sphere) over the sequence's extend steps"
        )
    return support._replace(widen=widen)


@shift_block(
    "truncate", SUPPORT, Dial("training radii the support's ball grows per step", 0.5, 0.0, 3.0)
)
def truncate(support: Support, num_classes: int, intensity: float) -> Support:
    """The support's ball grows by half its training radius (Control+Shift's truncation)."""
    return support._replace(grow=support.grow + intensity)
