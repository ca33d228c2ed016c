"""Tensor splits: one split of one step as uint8 images and labels, ready for a device."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class TensorSplit:
    """One split of one step: uint8 images N×C×H×W, int64 labels, optional per-sample weights."""

    x: torch.Tensor
    y: torch.Tensor
    weight: torch.Tensor | None = None

    @property
    def image_size(self) -> tuple[int, int]:
        """(height, width) of its images."""
        return int(self.x.shape[-2]), int(self.x.shape[-1])

    @classmethod
    def from_arrays(
        cls, x: np.ndarray, y: np.ndarray, weight: np.ndarray | None = None
    ) -> TensorSplit:
        return cls(
            torch.from_numpy(np.ascontiguousarray(x)),
            torch.from_numpy(np.asarray(y, dtype=np.int64)),
            None if weight is None else torch.as_tensor(weight, dtype=torch.float32),
        )

    @classmethod
    def concat(cls, parts: Sequence[TensorSplit]) -> TensorSplit:
        """Several steps as one set; weights default to 1 where some parts have them."""
        weights = None
        if any(p.weight is not None for p in parts):
            weights = torch.cat(
                [p.weight if p.weight is not None else torch.ones(len(p)) for p in parts]
            )
        return cls(torch.cat([p.x for p in parts]), torch.cat([p.y for p in parts]), weights)

    def __len__(self) -> int:
        return len(self.y)

    def subset(self, index: torch.Tensor) -> TensorSplit:
        """The images at ``index`` (a memory, a size of a curve), their weights with them."""
        return TensorSplit(
            self.x[index], self.y[index], None if self.weight is None else self.weight[index]
        )

    def to(self, device: torch.device) -> TensorSplit:
        return TensorSplit(
            self.x.to(device),
            self.y.to(device),
            None if self.weight is None else self.weight.to(device),
        )
