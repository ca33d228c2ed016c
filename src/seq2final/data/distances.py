"""How much a sequence shifts: exact Wasserstein-2 and 1-NN distances in a PCA space of pixels.

Following the paper (App. B), images are flattened (3·H·W features, on the 0-255 scale), a PCA is
fitted on all training images of all steps, and every image is represented by the fewest
components that explain the requested variance (at most ``max_components``). Between two sample
sets the covariate distance is W2 = √(EMD with squared-Euclidean cost), solved exactly with POT's
network simplex; the conditional distance averages per-class W2 with the class frequencies of the
second set. Beside them, Control+Shift's (Friedman & Chowers) 1-NN distance: the mean, over the
second set's images, of the Euclidean distance to the nearest image of the first, in the same PCA
space. Tables normalise by the final train-vs-test distance, so 1 means "as far as an
in-distribution test set" (paper Tables 5-6).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from seq2final.core.errors import Seq2FinalError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Embedded:
    """PCA coordinates and labels of one sample set."""

    name: str
    features: np.ndarray
    labels: np.ndarray


def fit_pca_features(
    train_sets: list[tuple[np.ndarray, np.ndarray]],
    test_set: tuple[np.ndarray, np.ndarray],
    variance: float,
    max_components: int,
    seed: int,
) -> tuple[list[np.ndarray], np.ndarray, int]:
    """PCA on all training images; return the truncated train and test coordinates and k.

    The randomised solver is seeded, so the same sequence always gives the same distances.
    """
    from sklearn.decomposition import PCA  # lazy: see docs/architecture.md, "Start-up"

    flat = [x.reshape(len(x), -1).astype(np.float32) for x, _ in train_sets]
    stacked = np.concatenate(flat)
    n_components = min(max_components, stacked.shape[0], stacked.shape[1])
    pca = PCA(n_components=n_components, svd_solver="randomized", random_state=seed).fit(stacked)
    cumulative = np.cumsum(pca.explained_variance_ratio_)
    k = int(min(np.searchsorted(cumulative, variance - 1e-12) + 1, n_components))
    project = lambda x: pca.transform(x.reshape(len(x), -1).astype(np.float32))[:, :k]  # noqa: E731
    return [project(x) for x, _ in train_sets], project(test_set[0]), k


def wasserstein2(a: np.ndarray, b: np.ndarray, max_iterations: int, pair: str) -> float:
    """Exact W2 between two point clouds with uniform weights.

    If the network simplex stops at its iteration cap the value is an upper bound, not the
    distance; we say so in a warning that names the pair rather than report it silently (POT's
    own nameless warning is filtered in :mod:`seq2final.core.known_warnings`).
    """
    if len(a) == 0 or len(b) == 0:
        raise Seq2FinalError(
            f"W2 of an empty set ({pair}); valid: sequences whose splits have images"
        )
    import ot  # lazy: see docs/architecture.md, "Start-up"

    cost = ot.dist(a.astype(np.float64), b.astype(np.float64))
    weights_a = np.full(len(a), 1.0 / len(a))
    weights_b = np.full(len(b), 1.0 / len(b))
    value, log = ot.emd2(weights_a, weights_b, cost, numItermax=max_iterations, log=True)
    if log.get("warning"):
        logger.warning(
            "W2 for %s did not converge (%s); value is an upper bound", pair, log["warning"]
        )
    return float(np.sqrt(max(value, 0.0)))


def nearest_neighbour_distance(reference: np.ndarray, shifted: np.ndarray, pair: str) -> float:
    """Control+Shift's 1-NN distance: the mean, over the ``shifted`` points, of the Euclidean
    distance to the nearest ``reference`` point (scikit-learn's exact ``NearestNeighbors``).
    Unlike W2 it asks only whether each shifted image has a close training image, so it grows
    with the part of the shifted support that the training support does not cover."""
    if len(reference) == 0 or len(shifted) == 0:
        raise Seq2FinalError(
            f"1-NN distance of an empty set ({pair}); valid: sequences whose splits have images"
        )
    from sklearn.neighbors import NearestNeighbors  # lazy: see docs/architecture.md, "Start-up"

    index = NearestNeighbors(n_neighbors=1).fit(reference.astype(np.float64))
    distances, _ = index.kneighbors(shifted.astype(np.float64))
    return float(distances.mean())


def conditional_wasserstein2(first: Embedded, second: Embedded, max_iterations: int) -> float:
    """Σ_y P_second(y) · W2(first | y, second | y) over the classes of the second set.

    A class missing from the first set has no distance; it is left out and the weights of the
    others renormalised, with a warning, instead of failing the whole table.
    """
    classes, counts = np.unique(second.labels, return_counts=True)
    total, weight_sum = 0.0, 0.0
    for label, count in zip(classes, counts, strict=True):
        in_first = first.features[first.labels == label]
        if len(in_first) == 0:
            logger.warning("class %s absent from %s; left out of W2(X|Y)", label, first.name)
            continue
        pair = f"{first.name} vs {second.name}, class {label}"
        total += count * wasserstein2(
            in_first, second.features[second.labels == label], max_iterations, pair
        )
        weight_sum += count
    if weight_sum == 0:
        raise Seq2FinalError(
            f"no class of {second.name} appears in {first.name}; W2(X|Y) undefined"
        )
    return total / weight_sum
