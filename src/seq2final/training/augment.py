"""Data augmentation of training batches, a factor of Control+Shift's study (docs/intensity.md).

Control+Shift finds that augmentation raises clean accuracy and softens, without removing, the
drop under a covariate shift; ``training.augment`` makes it one switch of any fit. Each image of a
training batch gets its own draw of torchvision's v2 transforms, on the fit's device and on the
uint8 pixels (before the input scale), from a random stream of the fit's own (an
:class:`Augmenter`, seeded by the fit's seed): a seed gives the same batches, and a model of a
fused stack draws what its single fit draws whatever the others and dropout draw. Validation,
test and the partners of mixing methods are never augmented.
"""

from __future__ import annotations

from typing import Literal

import torch

from seq2final.core import torchvision_guard  # noqa: F401  (must precede torchvision)
from seq2final.core.seeds import derived_seed

from torchvision.transforms import v2  # isort: skip

Augment = Literal["none", "flip_crop", "randaugment"]
CROP_PADDING = 4
"""Pixels of zero padding before the random crop: the usual CIFAR recipe (a 32×32 image moves by
up to 4 pixels)."""


def augmentation(kind: Augment, size: tuple[int, int]) -> v2.Transform | None:
    """The per-image transform of ``kind`` for images of ``size`` (``None`` for ``none``).

    ``flip_crop``: a horizontal flip with probability ½, then a crop of the original size from
    the image padded by :data:`CROP_PADDING`. ``randaugment``: torchvision's RandAugment at its
    defaults (two operations of magnitude 9 of 31).
    """
    if kind == "none":
        return None
    if kind == "flip_crop":
        return v2.Compose([v2.RandomHorizontalFlip(), v2.RandomCrop(size, padding=CROP_PADDING)])
    return v2.RandAugment()


def augment_batch(images: torch.Tensor, transform: v2.Transform | None) -> torch.Tensor:
    """Each uint8 image of an N×C×H×W batch through its own draw of ``transform``.

    A v2 transform draws its parameters once per call, so a batch in one call would move every
    image alike; one call per image gives each its own flip, crop or operations.
    """
    if transform is None:
        return images
    return torch.stack([transform(image) for image in images])


class Augmenter:
    """One model's augmentation of its training batches, from a random stream of its own.

    torchvision's transforms draw from torch's global generator, which dropout draws from too
    (and under ``vmap`` even at rate 0); each call runs on this augmenter's own state, seeded by
    the fit's ``seed`` (through :func:`~seq2final.core.seeds.derived_seed`, so its draws are
    not the batch order's, which a generator seeded by ``seed`` itself draws), so what a model's
    images draw depends on its seed and its batches alone.
    """

    def __init__(self, kind: Augment, size: tuple[int, int], seed: int) -> None:
        self.transform = augmentation(kind, size)
        self._state = torch.Generator().manual_seed(derived_seed(seed, "augment")).get_state()

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        """Each image of the batch through its own draw (the batch as it is without one)."""
        if self.transform is None:
            return images
        with torch.random.fork_rng(devices=[]):
            torch.set_rng_state(self._state)
            out = augment_batch(images, self.transform)
            self._state = torch.get_rng_state()
        return out
