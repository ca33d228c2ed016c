import pytest
import torch

from seq2final.training.metrics import classification_metrics, expected_calibration_error


def test_metrics_on_a_hand_made_case():
    logits = torch.tensor([[5.0, 0.0], [0.0, 5.0], [5.0, 0.0], [5.0, 0.0]])
    labels = torch.tensor([0, 1, 1, 1])
    m = classification_metrics(logits, labels)
    assert m["accuracy"] == 0.5
    assert m["worst_class_accuracy"] == pytest.approx(1 / 3)
    assert m["nll"] > 0


def test_ece_is_zero_when_confidence_matches_accuracy_and_large_when_overconfident():
    half = torch.tensor([[0.5, 0.5]] * 4)
    assert expected_calibration_error(half, torch.tensor([0, 1, 0, 1])) == pytest.approx(0.0)
    sure = torch.tensor([[1.0, 0.0]] * 4)
    assert expected_calibration_error(sure, torch.tensor([1, 1, 1, 1])) == pytest.approx(1.0)
