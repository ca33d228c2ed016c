"""How a job reports what it chose among several candidate models."""

import numpy as np
import pytest
import torch
from torch import nn

from seq2final.methods import FinalOutcome
from seq2final.runs.execution import chain_accuracies
from seq2final.training.engine import Engine
from seq2final.training.tensors import TensorSplit


class AlwaysPredicts(nn.Module):
    """A model whose logits pick one class for every image, so its accuracy is known exactly."""

    def __init__(self, label: int, classes: int = 3) -> None:
        super().__init__()
        self.logits = nn.Parameter(torch.nn.functional.one_hot(torch.tensor(label), classes) * 5.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.logits.expand(len(x), -1)


def test_every_chain_reports_the_test_accuracy_of_its_own_model():
    test = TensorSplit.from_arrays(np.zeros((5, 3, 4, 4), np.uint8), np.array([0, 0, 0, 1, 2]))
    chosen, other, third = AlwaysPredicts(1), AlwaysPredicts(0), AlwaysPredicts(2)
    # The chosen chain (best on validation) is the worst on test, as can happen with SFT.
    outcome = FinalOutcome(
        chosen,
        None,
        {"chain": "b"},
        0.7,
        {"a": (other, 0.5), "b": (chosen, 0.7), "c": (third, 0.6)},
    )
    assert chain_accuracies(outcome, test, Engine(device="cpu")) == {
        "a": {"valid_accuracy": 0.5, "test_accuracy": pytest.approx(0.6)},
        "b": {"valid_accuracy": 0.7, "test_accuracy": pytest.approx(0.2)},
        "c": {"valid_accuracy": 0.6, "test_accuracy": pytest.approx(0.2)},
    }


def test_a_single_model_has_no_chains_to_report():
    test = TensorSplit.from_arrays(np.zeros((2, 3, 4, 4), np.uint8), np.array([0, 1]))
    outcome = FinalOutcome(AlwaysPredicts(0), None)
    assert chain_accuracies(outcome, test, Engine(device="cpu")) == {}
