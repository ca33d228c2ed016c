"""One set of fit rules: a single fit and a fused stack keep the same epoch and stop alike."""

import pytest
import torch

from seq2final.models import build_model
from seq2final.training import HyperParameters, Task, fit
from seq2final.training import fused as fused_module
from seq2final.training import loop as training
from seq2final.training.engine import Engine
from seq2final.training.fused import FusedTrial, fit_fused
from seq2final.training.rules import Selection
from seq2final.training.tensors import TensorSplit

ENGINE = Engine(batch_size=8, eval_batch_size=16, patience=2)
# epoch 0 .. 7: 0.6 at epoch 3 ties epoch 2 (not a gain: the earliest wins, a stall), 0.55 is the
# second stall in a row, so the fit stops after epoch 4 with epoch 2 selected.
CURVE = [0.5, 0.4, 0.6, 0.6, 0.55, 0.7, 0.5, 0.5]


def _data(seed=0):
    g = torch.Generator().manual_seed(seed)
    return TensorSplit(
        torch.randint(0, 256, (16, 3, 8, 8), dtype=torch.uint8, generator=g), torch.arange(16) % 3
    )


def test_the_rules_on_a_curve():
    selection = Selection(patience=2)
    chosen = [selection.observe(epoch, accuracy) for epoch, accuracy in enumerate(CURVE[:5])]
    assert chosen == [True, False, True, False, False]
    assert (selection.best_epoch, selection.best_accuracy, selection.stopped) == (2, 0.6, True)


def test_fused_and_single_fits_choose_the_same_epoch_on_a_scripted_curve(monkeypatch):
    task = Task([_data()], _data(seed=1))
    single_curve = iter(CURVE)
    monkeypatch.setattr(training, "_validate", lambda *args: (0.0, next(single_curve)))
    single = fit(build_model("convnet_1", 3), task, HyperParameters(lr=1e-3), ENGINE, 7, seed=0)
    fused_curve = iter(CURVE)

    def scripted(stack, *args):
        accuracy = next(fused_curve)
        return torch.tensor([[0.0] * len(stack.members), [accuracy] * len(stack.members)])

    monkeypatch.setattr(fused_module, "_validate", scripted)
    models = [build_model("convnet_1", 3) for _ in range(2)]
    trials = [FusedTrial(HyperParameters(lr=1e-3), seed) for seed in (0, 1)]
    results = fit_fused(models, task, trials, ENGINE, 7)
    assert (single.best_epoch, single.epochs, single.valid_accuracy) == (2, 4, 0.6)
    for result in results:
        assert (result.best_epoch, result.epochs) == (single.best_epoch, single.epochs)
        assert result.valid_accuracy == pytest.approx(single.valid_accuracy)
