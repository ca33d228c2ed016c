"""The epoch's schedule is one object that the single fit, the fused fit and the FLOP count all
run: changed, it changes what each of them does, together."""

import pytest
import torch
from torch import nn

from seq2final.training import fused
from seq2final.training.callbacks import FitCallback
from seq2final.training.engine import Engine
from seq2final.training.epochs import EpochSchedule
from seq2final.training.flops import fit_cost
from seq2final.training.fused import FusedTrial, fit_fused
from seq2final.training.hyperparameters import HyperParameters
from seq2final.training.loop import fit
from seq2final.training.objectives import Task
from seq2final.training.tensors import TensorSplit


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.Flatten(), nn.Linear(256, 2))


def _split(n):
    return TensorSplit(torch.randint(0, 256, (n, 3, 8, 8), dtype=torch.uint8), torch.arange(n) % 2)


class Updates(FitCallback):
    def __init__(self):
        self.count = 0

    def after_update(self, fit_state):
        self.count += 1


def test_a_schedule_counts_the_longest_domains_batches_and_the_images_they_draw():
    schedule = EpochSchedule(batch_size=4, domain_sizes=(10, 3))
    assert schedule.batches == 3  # ceil(10/4); the 3-image domain cycles its one batch
    assert schedule.images == pytest.approx(10 + 3 * 3)


@pytest.mark.parametrize("batches", [None, 5])
def test_the_single_and_the_fused_fit_take_the_schedules_steps(monkeypatch, batches):
    """Under the schedule as it is (3 steps an epoch of 10 images in batches of 4) and under one
    patched to 5, the single fit takes that many updates an epoch, and the fused fit as many."""
    if batches is not None:
        monkeypatch.setattr(EpochSchedule, "batches", property(lambda self: batches))
    steps = EpochSchedule(4, (10,)).batches
    assert steps == (3 if batches is None else 5)
    updates = Updates()
    engine = Engine(batch_size=4, patience=10)
    fit(_model(), Task([_split(10)], _split(6), callbacks=[updates]), HyperParameters(lr=1e-3),
        engine, max_epochs=2, seed=0)  # fmt: skip
    assert updates.count == 2 * steps
    stacked = []
    real = fused._Stack.adam_update

    def counted(self):
        stacked.append(self.updates)
        real(self)

    monkeypatch.setattr(fused._Stack, "adam_update", counted)
    fit_fused([_model()], Task([_split(10)], _split(6)),
              [FusedTrial(HyperParameters(lr=1e-3), 0)], engine, max_epochs=2)  # fmt: skip
    assert len(stacked) == 2 * steps


def test_the_flop_count_charges_an_epoch_the_images_the_schedule_draws(monkeypatch):
    task, hp, engine = Task([_split(10)], _split(6)), HyperParameters(lr=1e-3), Engine(batch_size=4)
    (before,) = fit_cost(_model(), task, hp, engine).train_epochs  # 3 steps: the 10 images
    monkeypatch.setattr(EpochSchedule, "batches", property(lambda self: 5))
    (after,) = fit_cost(_model(), task, hp, engine).train_epochs  # 5 steps of 10/3 images each
    assert after / before == pytest.approx((5 * 10 / 3) / 10, rel=1e-6)
