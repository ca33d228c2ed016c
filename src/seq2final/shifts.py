"""Shift building blocks and the cumulative shift state they advance.

A sequence step names one or more blocks (``rotation``, ``corruption,label_flip``, ...). Each block
is a pure function that advances the cumulative :class:`ShiftState` by one step; the state is then
applied to freshly drawn images in a fixed order of effects, as in the original benchmark:

1. discrete noise, once per corruption step so far (fresh draws each time, clipped to 0-255);
2. rotation by the class's accumulated angle (nearest, black corners, counter-clockwise > 0);
3. recolouring by the class's accumulated RGB tint (clipped to 255);
4. label flips, in the order they were added (rotation and tint use the pre-flip labels).

Class probabilities (``label_shift``) and sub-population proportions (``subpop``) act at sampling
time instead; the sequence builder reads them from the state.

Adding a block is one decorated function in :data:`SHIFTS`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch

from seq2final import _torchvision_guard  # noqa: F401  (must precede torchvision)
from seq2final.errors import Seq2FinalError
from seq2final.registry import Registry

ROTATION_STEP_DEGREES = 30.0
TINT_STEP = 30
LABEL_SHIFT_TOTAL = 0.3
NOISE_LOW, NOISE_HIGH = -3, 3  # numpy randint bounds: draws in {-3, ..., 2}
SOURCE_SUBPOP = (0.5, 0.5, 0.0, 0.0, 0.0)
NUM_SUBPOPULATIONS = 5
FLIP_REVERSE, FLIP_PLUS_TWO = 1, 2


@dataclass(frozen=True)
class ShiftState:
    """Everything the shifts so far have accumulated, per class where it is class-dependent.

    Tuples rather than arrays so the state is hashable and goes into a sequence's manifest as is.
    """

    num_classes: int
    noise_applications: int = 0
    angles: tuple[float, ...] = ()
    tints: tuple[tuple[int, int, int], ...] = ()
    flips: tuple[int, ...] = ()
    class_probs: tuple[float, ...] = ()
    subpop: tuple[float, ...] | None = None
    subpop_steps: int = 0
    label_shift_steps: int = 0

    @classmethod
    def source(cls, num_classes: int, with_subpopulations: bool = False) -> ShiftState:
        """The unshifted state of time step 0."""
        return cls(
            num_classes=num_classes,
            angles=(0.0,) * num_classes,
            tints=((0, 0, 0),) * num_classes,
            class_probs=(1.0 / num_classes,) * num_classes,
            subpop=SOURCE_SUBPOP if with_subpopulations else None,
        )


ShiftBlock = Callable[[ShiftState], ShiftState]
SHIFTS: Registry[ShiftBlock] = Registry("shift block")


@SHIFTS.register("corruption")
def corruption(state: ShiftState) -> ShiftState:
    """One more application of uniform integer noise in {-3..2} per pixel and channel."""
    return replace(state, noise_applications=state.noise_applications + 1)


@SHIFTS.register("rotation")
def rotation(state: ShiftState) -> ShiftState:
    """Every class turns 30° further counter-clockwise."""
    return replace(state, angles=tuple(a + ROTATION_STEP_DEGREES for a in state.angles))


@SHIFTS.register("rotation_cond")
def rotation_cond(state: ShiftState) -> ShiftState:
    """Even classes turn 30° counter-clockwise, odd classes 30° clockwise."""
    return replace(
        state,
        angles=tuple(
            a + (ROTATION_STEP_DEGREES if c % 2 == 0 else -ROTATION_STEP_DEGREES)
            for c, a in enumerate(state.angles)
        ),
    )


@SHIFTS.register("recolor")
def recolor(state: ShiftState) -> ShiftState:
    """Every class gets 30 more on the red channel."""
    return replace(state, tints=tuple((r + TINT_STEP, g, b) for r, g, b in state.tints))


@SHIFTS.register("recolor_cond")
def recolor_cond(state: ShiftState) -> ShiftState:
    """Class c gets 30 more on channel c mod 3 (R, G, B)."""
    tints = []
    for c, tint in enumerate(state.tints):
        channels = list(tint)
        channels[c % 3] += TINT_STEP
        tints.append((channels[0], channels[1], channels[2]))
    return replace(state, tints=tuple(tints))


@SHIFTS.register("label_flip")
def label_flip(state: ShiftState) -> ShiftState:
    """Append a flip, alternating y → C−1−y and y → (y+2) mod C, starting with the first."""
    kind = FLIP_REVERSE if len(state.flips) % 2 == 0 else FLIP_PLUS_TWO
    return replace(state, flips=(*state.flips, kind))


@SHIFTS.register("label_shift")
def label_shift(state: ShiftState) -> ShiftState:
    """Move 0.3/C of sampling probability from every even class to every odd class."""
    delta = LABEL_SHIFT_TOTAL / state.num_classes
    probs = tuple(p - delta if c % 2 == 0 else p + delta for c, p in enumerate(state.class_probs))
    step = state.label_shift_steps + 1
    if min(probs) < -1e-12:
        raise Seq2FinalError(
            f"label_shift step {step} would make an even class's probability negative; "
            f"valid: at most {int(1 / LABEL_SHIFT_TOTAL)} label_shift steps"
        )
    return replace(state, class_probs=tuple(max(p, 0.0) for p in probs), label_shift_steps=step)


@SHIFTS.register("subpop")
def subpop(state: ShiftState) -> ShiftState:
    """Bring in the next sub-class and (from the second step on) drop the oldest.

    Source {0,1} → {0,1,2} → {1,2,3} → {2,3,4}: the final step shares no sub-class with the source.
    """
    if state.subpop is None:
        raise Seq2FinalError("'subpop' needs a dataset with sub-classes; valid: cifar100, digits")
    step = state.subpop_steps + 1
    first, last = max(0, step - 1), step + 1
    if last >= NUM_SUBPOPULATIONS:
        raise Seq2FinalError(
            f"subpop step {step} has no new sub-class left; valid: at most "
            f"{NUM_SUBPOPULATIONS - 2} subpop steps"
        )
    share = 1.0 / (last - first + 1)
    proportions = tuple(share if first <= s <= last else 0.0 for s in range(NUM_SUBPOPULATIONS))
    return replace(state, subpop=proportions, subpop_steps=step)


def advance(state: ShiftState, blocks: Sequence[str]) -> ShiftState:
    """The state after one step made of ``blocks`` (applied in the order given)."""
    for name in blocks:
        state = SHIFTS[name](state)
    return state


# --------------------------------------------------------------------------------------------
# Applying a state to images
# --------------------------------------------------------------------------------------------


def add_noise(images: np.ndarray, rng: np.random.RandomState) -> np.ndarray:
    """Add integer noise drawn uniformly from {-3..2} to every pixel and channel, then clip."""
    noise = rng.randint(NOISE_LOW, NOISE_HIGH, size=images.shape)
    return np.clip(images.astype(np.int16) + noise, 0, 255).astype(np.uint8)


def rotate(images: np.ndarray, labels: np.ndarray, angles: Sequence[float]) -> np.ndarray:
    """Rotate each image by its class's angle (degrees, counter-clockwise), nearest, black fill.

    Rotation runs batched per distinct angle on uint8 tensors with torchvision, so the pixels are
    exactly those of ``torchvision.transforms.functional.rotate`` with its defaults.
    """
    from torchvision.transforms.v2 import InterpolationMode
    from torchvision.transforms.v2 import functional as tvf

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


def recolour(images: np.ndarray, labels: np.ndarray, tints: Sequence[Sequence[int]]) -> np.ndarray:
    """Add each image's class tint to its RGB channels, clipped to 255."""
    per_image = np.asarray(tints, dtype=np.int16)[labels][:, :, None, None]
    if not per_image.any():
        return images
    return np.clip(images.astype(np.int16) + per_image, 0, 255).astype(np.uint8)


def flip_labels(labels: np.ndarray, flips: Sequence[int], num_classes: int) -> np.ndarray:
    """Apply every flip in order: type 1 is y → C−1−y, type 2 is y → (y+2) mod C."""
    labels = labels.copy()
    for kind in flips:
        labels = (num_classes - 1 - labels) if kind == FLIP_REVERSE else (labels + 2) % num_classes
    return labels


def apply_state(
    splits: Sequence[tuple[np.ndarray, np.ndarray]],
    state: ShiftState,
    rng: np.random.RandomState,
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Apply ``state`` to (images, labels) splits and return the shifted splits.

    Noise is drawn application by application, and within one application split by split (train,
    valid, test), which is the original random-number order; it keeps the samples bit-identical
    to the original benchmark's for the same pools.
    """
    images = [x for x, _ in splits]
    for _ in range(state.noise_applications):
        images = [add_noise(x, rng) for x in images]
    shifted = []
    for x, (_, y) in zip(images, splits, strict=True):
        if any(state.angles):
            x = rotate(x, y, state.angles)
        x = recolour(x, y, state.tints)
        shifted.append((x, flip_labels(y, state.flips, state.num_classes)))
    return shifted
