import numpy as np
import pytest

from seq2final.core.errors import Seq2FinalError
from seq2final.data.distances import (
    Embedded,
    conditional_wasserstein2,
    fit_pca_features,
    nearest_neighbour_distance,
    wasserstein2,
)


def test_w2_of_a_set_with_itself_is_zero():
    points = np.random.default_rng(0).normal(size=(50, 4))
    assert wasserstein2(points, points, 10**6, "self") == pytest.approx(0.0, abs=1e-6)


def test_w2_matches_a_hand_computed_case():
    # Two points vs the same two points shifted by (3, 4): every unit of mass moves 5 → W2 = 5.
    a = np.array([[0.0, 0.0], [10.0, 0.0]])
    assert wasserstein2(a, a + [3.0, 4.0], 10**6, "shifted") == pytest.approx(5.0)
    # {0, 1} vs {0, 3} on a line: optimal plan 0→0, 1→3, cost (0 + 4)/2 = 2 → W2 = √2.
    assert wasserstein2(
        np.array([[0.0], [1.0]]), np.array([[0.0], [3.0]]), 10**6, "line"
    ) == pytest.approx(np.sqrt(2))


def test_w2_with_unequal_sizes_uses_uniform_weights():
    # One point vs two at distance 1 and 3: cost (1 + 9)/2 = 5.
    assert wasserstein2(
        np.array([[0.0]]), np.array([[1.0], [3.0]]), 10**6, "unequal"
    ) == pytest.approx(np.sqrt(5))


def test_non_convergence_is_warned_with_the_pair(caplog):
    rng = np.random.default_rng(0)
    wasserstein2(rng.normal(size=(60, 3)), rng.normal(size=(60, 3)), 5, "tiny budget pair")
    assert "tiny budget pair" in caplog.text and "did not converge" in caplog.text


def test_the_1nn_distance_is_the_mean_distance_to_the_nearest_reference_point():
    rng = np.random.default_rng(0)
    reference, shifted = rng.normal(size=(40, 5)), rng.normal(size=(25, 5)) + 0.7
    brute = np.mean([min(np.linalg.norm(x - r) for r in reference) for x in shifted])
    assert nearest_neighbour_distance(reference, shifted, "pair") == pytest.approx(brute, rel=1e-12)
    # by hand: {0, 10} against {1, 7}: 1 → 0 at 1, 7 → 10 at 3; mean 2; the other way 1 and 3
    line = np.array([[0.0], [10.0]]), np.array([[1.0], [7.0]])
    assert nearest_neighbour_distance(*line, "line") == pytest.approx(2.0)
    assert nearest_neighbour_distance(line[1], line[0], "back") == pytest.approx(2.0)
    assert nearest_neighbour_distance(reference, reference, "self") == 0.0
    with pytest.raises(Seq2FinalError, match=r"1-NN distance of an empty set \(empty\)"):
        nearest_neighbour_distance(reference, shifted[:0], "empty")


def test_conditional_w2_weights_classes_by_the_second_set():
    first = Embedded("a", np.array([[0.0], [10.0]]), np.array([0, 1]))
    second = Embedded("b", np.array([[1.0], [12.0], [12.0], [12.0]]), np.array([0, 1, 1, 1]))
    # class 0: W2 = 1 with weight 1/4; class 1: W2 = 2 with weight 3/4.
    assert conditional_wasserstein2(first, second, 10**6) == pytest.approx(0.25 * 1 + 0.75 * 2)


def test_pca_keeps_enough_components_for_the_variance():
    rng = np.random.default_rng(0)
    # Images whose pixels vary along two directions only, plus tiny noise.
    basis = rng.normal(size=(2, 3 * 8 * 8))
    coefficients = rng.normal(size=(200, 2)) * [60.0, 30.0]
    flat = np.clip(128 + coefficients @ basis + rng.normal(size=(200, 192)) * 0.01, 0, 255)
    images = flat.astype(np.uint8).reshape(200, 3, 8, 8)
    labels = np.zeros(200, np.int64)
    trains, test, k = fit_pca_features(
        [(images[:150], labels[:150])], (images[150:], labels[150:]), 0.95, 100, 0
    )
    assert k == 2
    assert trains[0].shape == (150, 2) and test.shape == (50, 2)
    again = fit_pca_features(
        [(images[:150], labels[:150])], (images[150:], labels[150:]), 0.95, 100, 0
    )
    assert np.array_equal(again[0][0], trains[0])
