"""How many images a sequence's steps take when its spec gives no size.

A source registers its own defaults (the embedded digits are far smaller than CIFAR); every other
source uses the paper's sizes (paper §4: 6000 source images, 4000/6000 alternating targets, a
5000-image test set and a 20000-image oracle step).
"""

from __future__ import annotations

from dataclasses import dataclass


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
