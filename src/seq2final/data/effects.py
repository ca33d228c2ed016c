"""Effects: the kinds of change shifts accumulate, each with its own state and how it acts.

A sequence step advances some effects (through the shift blocks in :mod:`seq2final.data.shifts`);
the cumulative :class:`ShiftState` holds every effect's value. Effects that change drawn images or
labels have an ``apply`` and act in ascending ``order``, as in the original benchmark:

1. ``noise`` (10): discrete noise, once per corruption step so far (fresh draws each time,
   clipped to 0-255);
2. ``rotation`` (20): rotation by the class's accumulated angle (nearest, black corners,
   counter-clockwise > 0);
3. ``tint`` (30): recolouring by the class's accumulated RGB tint (clipped to 255);
4. ``label_flips`` (40): label flips, in the order they were added (rotation and tint use the
   pre-flip labels).

``class_weights``, ``subpopulations`` and ``support`` act at sampling time instead: the sampler
reads their values (:data:`CLASS_WEIGHTS`, :data:`SUBPOPULATIONS`, :data:`SUPPORT`). A new kind of image or label change is
one :func:`effect` registration, with no change here or in the sampler; a new way of sampling
would be a change of the sampler. An effect is registered for every sequence, so at its initial
value it must leave images and labels as they are and draw no random numbers (a registry-wide
test checks every registered effect).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch

from seq2final.core import torchvision_guard  # noqa: F401  (must precede torchvision)
from seq2final.core.registry import Registry

from torchvision.transforms.v2 import InterpolationMode  # isort: skip
from torchvision.transforms.v2 import functional as tvf  # isort: skip

NOISE_LOW, NOISE_HIGH = -3, 3  # numpy randint bounds: draws in {-3, ..., 2}
SOURCE_SUBPOPULATIONS = (0.5, 0.5, 0.0, 0.0, 0.0)
FLIP_REVERSE, FLIP_PLUS_TWO = 1, 2

Splits = list[tuple[np.ndarray, np.ndarray]]
"""Drawn (images N×3×H×W uint8, labels) of each split of one step: train, valid (and test)."""


class Support(NamedTuple):
    """Where a step's support lies (:mod:`seq2final.data.support`): the cap's axis turned
    ``turn`` degrees from ``t1`` towards ``t2``, its half-angle widened by ``widen`` degrees
    beyond 90, the ball's radius grown by ``grow`` training radii."""

    turn: float = 0.0
    widen: float = 0.0
    grow: float = 0.0


class Weights(NamedTuple):
    """A sampling effect's value: its weights (``None``: not sampled this way) and its step count."""

    weights: tuple[float, ...] | None
    steps: int = 0


@dataclass(frozen=True)
class Effect:
    """One kind of change: its value at the source step and, for image/label effects, its action.

    ``initial(num_classes, has_subpopulations)`` is the unshifted value. ``apply(splits, value,
    rng, num_classes)`` returns the splits changed by ``value``; effects without one are read by
    the sampler. ``order`` places the action among the others (lower acts first).
    """

    initial: Callable[[int, bool], Any]
    apply: Callable[[Splits, Any, np.random.RandomState, int], Splits] | None = None
    order: float = 0.0


EFFECTS: Registry[Effect] = Registry("shift effect")
CLASS_WEIGHTS = "class_weights"
SUBPOPULATIONS = "subpopulations"
SUPPORT = "support"


def effect(
    name: str, initial: Callable[[int, bool], Any], order: float = 0.0
) -> Callable[[Callable[..., Splits]], Callable[..., Splits]]:
    """Register the decorated ``apply`` as effect ``name``, starting from ``initial``."""

    def register(apply: Callable[..., Splits]) -> Callable[..., Splits]:
        EFFECTS.add(name, Effect(initial, apply, order))
        return apply

    return register


@dataclass(frozen=True)
class ShiftState:
    """Every effect's accumulated value, per class where it is class-dependent.

    Values are tuples rather than arrays so the state is hashable and goes into a sequence's
    manifest as is.
    """

    num_classes: int
    values: tuple[tuple[str, Any], ...]

    @classmethod
    def source(cls, num_classes: int, with_subpopulations: bool = False) -> ShiftState:
        """The unshifted state of time step 0."""
        return cls(
            num_classes,
            tuple(
                (name, e.initial(num_classes, with_subpopulations)) for name, e in EFFECTS.items()
            ),
        )

    def __getitem__(self, effect_name: str) -> Any:
        EFFECTS[effect_name]  # an unknown name is answered with the valid ones
        return dict(self.values)[effect_name]

    def with_value(self, effect_name: str, value: Any) -> ShiftState:
        EFFECTS[effect_name]
        return ShiftState(
            self.num_classes,
            tuple((name, value if name == effect_name else old) for name, old in self.values),
        )

    def describe(self) -> dict[str, Any]:
        """Every effect's value by name, as a sequence's manifest records it (manifest format 2;
        format 1 recorded the fields of the state class that effects replaced). The support
        is left out where it is the source's, so every manifest written before support shifts
        existed is written the same, byte for byte."""
        return {
            "num_classes": self.num_classes,
            **{
                name: value._asdict() if isinstance(value, Weights | Support) else value
                for name, value in self.values
                if not (name == SUPPORT and value == Support())
            },
        }

    def apply(self, splits: Splits, rng: np.random.RandomState) -> Splits:
        """Every image/label effect on ``splits``, in ``order``.

        Noise is drawn application by application, and within one application split by split
        (train, valid, test), which is the original random-number order; it keeps the samples
        bit-identical to the original benchmark's for the same pools.
        """
        active = sorted((e.order, name, e) for name, e in EFFECTS.items() if e.apply is not None)
        for _, name, entry in active:
            assert entry.apply is not None
            splits = entry.apply(splits, self[name], rng, self.num_classes)
        return splits


# --------------------------------------------------------------------------------------------
# The built-in effects
# --------------------------------------------------------------------------------------------


def add_noise(images: np.ndarray, rng: np.random.RandomState) -> np.ndarray:
    """Add integer noise drawn uniformly from {-3..2} to every pixel and channel, then clip."""
    noise = rng.randint(NOISE_LOW, NOISE_HIGH, size=images.shape)
    return np.clip(images.astype(np.int16) + noise, 0, 255).astype(np.uint8)


@effect("noise", initial=lambda classes, subpopulations: 0, order=10)
def _apply_noise(splits: Splits, applications: int, rng: np.random.RandomState, _: int) -> Splits:
    for _ in range(applications):
        splits = [(add_noise(x, rng), y) for x, y in splits]
    return splits


def rotate(images: np.ndarray, labels: np.ndarray, angles: Sequence[float]) -> np.ndarray:
    """Rotate each image by its class's angle (degrees, counter-clockwise), nearest, black fill.

    Rotation runs batched per distinct angle on uint8 tensors with torchvision, so the pixels are
    exactly those of ``torchvision.transforms.functional.rotate`` with its defaults.
    """
    out = images.copy()
    per_image = np.asarray(angles, dtype=np.float64)[labels]
    for angle in np.unique(per_image):
        if angle % 360 == 0:
            continue
        mask = per_image == angle
        batch = torch.from_numpy(images[mask])
        turned = tvf.rotate(batch, float(angle), interpolation=InterpolationMode.NEAREST, fill=0)
        out[mask] = turned.numpy()
    return out


@effect("rotation", initial=lambda classes, subpopulations: (0.0,) * classes, order=20)
def _apply_rotation(
    splits: Splits, angles: tuple[float, ...], rng: np.random.RandomState, _: int
) -> Splits:
    if not any(angles):
        return splits
    return [(rotate(x, y, angles), y) for x, y in splits]


def recolour(images: np.ndarray, labels: np.ndarray, tints: Sequence[Sequence[int]]) -> np.ndarray:
    """Add each image's class tint to its RGB channels, clipped to 255."""
    per_image = np.asarray(tints, dtype=np.int16)[labels][:, :, None, None]
    if not per_image.any():
        return images
    return np.clip(images.astype(np.int16) + per_image, 0, 255).astype(np.uint8)


@effect("tint", initial=lambda classes, subpopulations: ((0, 0, 0),) * classes, order=30)
def _apply_tint(
    splits: Splits, tints: tuple[tuple[int, int, int], ...], rng: np.random.RandomState, _: int
) -> Splits:
    return [(recolour(x, y, tints), y) for x, y in splits]


Flips = tuple[int | tuple[int, float], ...]
"""Label flips in the order added: a flip type, or (type, share) for a flip of part of each class."""


def flip_labels(labels: np.ndarray, flips: Flips, num_classes: int) -> np.ndarray:
    """Apply every flip in order: type 1 is y → C−1−y, type 2 is y → (y+2) mod C.

    A flip with a share moves the labels of the first ``round(share × n_c)`` images of every
    (pre-flip) class c in the split's order, which the sampler shuffled, so the choice draws no
    random number and a smaller share flips a subset of a larger one's images.
    """
    original, labels = labels, labels.copy()
    for entry in flips:
        kind, share = (entry, 1.0) if isinstance(entry, int) else entry
        moved = (num_classes - 1 - labels) if kind == FLIP_REVERSE else (labels + 2) % num_classes
        if share >= 1.0:
            labels = moved
            continue
        chosen = np.zeros(len(labels), dtype=bool)
        for c in np.unique(original):
            members = np.flatnonzero(original == c)
            chosen[members[: int(np.floor(share * len(members) + 0.5))]] = True
        labels = np.where(chosen, moved, labels)
    return labels


@effect("label_flips", initial=lambda classes, subpopulations: (), order=40)
def _apply_label_flips(
    splits: Splits, flips: Flips, rng: np.random.RandomState, num_classes: int
) -> Splits:
    return [(x, flip_labels(y, flips, num_classes)) for x, y in splits]


EFFECTS.add(
    CLASS_WEIGHTS, Effect(lambda classes, subpopulations: Weights((1.0 / classes,) * classes))
)
EFFECTS.add(
    SUBPOPULATIONS,
    Effect(
        lambda classes, subpopulations: Weights(SOURCE_SUBPOPULATIONS if subpopulations else None)
    ),
)
EFFECTS.add(SUPPORT, Effect(lambda classes, subpopulations: Support()))
