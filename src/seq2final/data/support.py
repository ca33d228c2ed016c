"""Support-overlap shifts of real images: Control+Shift's three families without a generator.

Control+Shift (Friedman & Chowers) shifts a distribution by moving its *support*: the training
images come from one region of a generator's latent sphere and the shifted ones from another,
which overlaps it partly, and the intensity is the share of the shifted support outside the
training one, I = 1 − |S_train ∩ S_shift| / |S_shift|. We have real images instead of a
generator, so a step *selects* real images by where they lie in a fixed embedding:

- the embedding is the PCA space of the source's training pool (as ``quantify_shift`` measures
  shift, :mod:`seq2final.data.distances`) cut to its first :data:`COMPONENTS` components, whitened,
  and centred per class, so that every class is split by a cap through its own mean;
- ``t1`` and ``t2`` are seeded random directions, ``t2`` made orthogonal to ``t1``;
- the training support is the hemisphere around ``t1`` (caps) and the ball of each class's median
  radius (truncation);
- ``overlap@θ`` turns the hemisphere's axis by θ from ``t1`` towards ``t2`` (the paper's
  slerp(t1, t2; 2θ/π) with orthogonal ends); ``extend@θ`` widens the cap around ``t1`` to the
  half-angle 90° + θ; ``truncate@g`` grows the ball's radius by g times the training radius.

The selection is exact, so each step's intensity I is counted, not estimated, and recorded in the
sequence's manifest beside its state (docs/intensity.md).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from seq2final.core.seeds import derived_seed
from seq2final.data.effects import SUPPORT, Support
from seq2final.data.sources import SourceData

COMPONENTS = 8
"""Dimensions of the selection space. On a sphere of d dimensions the angle to a fixed axis
spreads by about 1/√d radians, so with 8 the caps' shares grow gradually with θ (20° a standard
deviation) instead of all at once, as they would in the hundred components ``quantify_shift``
keeps."""
FIT_IMAGES = 10_000
"""Images the PCA is fitted on (a seeded draw from the training pool): plenty for 8 components."""
CAP_BLOCKS = ("overlap", "extend")
BALL_BLOCKS = ("truncate",)


class SupportSpace:
    """Every pool image's place in the selection space, and which of them a support holds.

    ``caps`` and ``ball`` say which of the two kinds of support the sequence uses (its blocks):
    the training support of a sequence that only truncates is the ball alone, and so on.
    """

    def __init__(
        self,
        points: dict[str, np.ndarray],
        radius: dict[str, np.ndarray],
        directions: tuple[np.ndarray, np.ndarray],
        caps: bool,
        ball: bool,
    ) -> None:
        self.points, self.radius = points, radius
        self.t1, self.t2 = directions
        self.caps, self.ball = caps, ball

    @classmethod
    def of_source(cls, source: SourceData, seed: int, caps: bool, ball: bool) -> SupportSpace:
        """The space of ``source``'s pools, fitted and oriented from ``seed``."""
        from sklearn.decomposition import PCA  # lazy: see docs/architecture.md, "Start-up"

        flat = source.x_train.reshape(len(source.x_train), -1).astype(np.float32)
        rng = np.random.RandomState(derived_seed(seed, SUPPORT))
        fit = flat[rng.permutation(len(flat))[:FIT_IMAGES]]
        components = min(COMPONENTS, fit.shape[0] - 1, fit.shape[1])
        pca = PCA(components, whiten=True, svd_solver="randomized", random_state=seed).fit(fit)
        kept = max(1, int((pca.explained_variance_ratio_ > 1e-9).sum()))  # drop empty directions
        train = pca.transform(flat)[:, :kept]
        test = pca.transform(source.x_test.reshape(len(source.x_test), -1).astype(np.float32))
        means = {c: train[source.y_train == c].mean(0) for c in np.unique(source.y_train)}
        points = {
            "train": train - np.stack([means[c] for c in source.y_train]),
            "test": test[:, :kept] - np.stack([means[c] for c in source.y_test]),
        }
        norms = np.linalg.norm(points["train"], axis=1)
        median = {c: float(np.median(norms[source.y_train == c])) for c in means}
        radius = {
            "train": np.array([median[c] for c in source.y_train]),
            "test": np.array([median[c] for c in source.y_test]),
        }
        draws = rng.standard_normal((2, kept))
        t1 = draws[0] / np.linalg.norm(draws[0])
        t2 = draws[1] - (draws[1] @ t1) * t1
        t2 = t2 / np.linalg.norm(t2) if np.linalg.norm(t2) > 0 else t2  # one dimension: no turn
        return cls(points, radius, (t1, t2), caps, ball)

    def axis(self, turn: float) -> np.ndarray:
        """``t1`` turned by ``turn`` degrees towards ``t2``."""
        angle = np.deg2rad(turn)
        return np.cos(angle) * self.t1 + np.sin(angle) * self.t2

    def inside(self, pool: str, indices: np.ndarray, support: Support) -> np.ndarray:
        """Which of the pool's images ``indices`` lie in ``support``."""
        points = self.points[pool][indices]
        norms = np.linalg.norm(points, axis=1)
        keep = np.ones(len(indices), dtype=bool)
        if self.caps:
            half = np.deg2rad(min(90.0 + support.widen, 180.0))
            keep &= points @ self.axis(support.turn) >= norms * np.cos(half) - 1e-12
        if self.ball:
            keep &= norms <= (1.0 + support.grow) * self.radius[pool][indices]
        return keep

    def intensity(self, support: Support, training: Sequence[Support] = (Support(),)) -> float:
        """Control+Shift's I of ``support`` against the training support, over the training pool:
        the share of the images it holds that the training support does not. The training
        support is the source's, or the union of several: a model trained on steps 0..T−1 has
        seen every one of their supports (docs/intensity.md, "Robustness slopes")."""
        every = np.arange(len(self.points["train"]))
        held = self.inside("train", every, support)
        base = np.zeros(len(every), dtype=bool)
        for seen in training:
            base |= self.inside("train", every, seen)
        return float((held & ~base).sum() / max(held.sum(), 1))
