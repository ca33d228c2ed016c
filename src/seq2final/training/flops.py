"""What a fit costs in floating-point operations, counted by PyTorch's ``FlopCounterMode``.

A fit's cost is its training steps, all trials included, plus its validation passes. Counting
every step under the counter would slow every step, so one training step per fit (per phase of
trained parameters) is counted on real batches of the fit's data (one batch of every training
domain, as a step takes them) and scaled to an epoch, and one forward pass on the validation images to a validation pass; a study's
cost is then these times the epochs every trial ran, which Optuna keeps for finished, pruned and
resumed trials alike. Convolutions and matrix products, the operations counted (2 FLOPs per
multiply-add, backward passes included), cost exactly in proportion to the images they see, so
the scaling is exact for them; element-wise operations, normalisation and the optimiser step are
not counted, as in ``FlopCounterMode`` itself and in NED's accounting of multiply-adds.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from seq2final.models import choose_trainable
from seq2final.training.callbacks import FitState
from seq2final.training.engine import Engine, autocast, run_model, scale_images
from seq2final.training.epochs import EpochSchedule, begin_epoch, end_callbacks, start_callbacks
from seq2final.training.hyperparameters import HyperParameters
from seq2final.training.objectives import Task, objective_loss
from seq2final.training.optimizers import build_optimizer
from seq2final.training.records import TrialRecord
from seq2final.training.tensors import TensorSplit
from seq2final.training.terms import Batch

COUNTED_BATCH = 8
"""Images per domain in the counted step: the counted operations cost in proportion to the images,
so a small batch gives the same count per image at a fraction of the counting time."""


def counted_flops(work: Callable[[], object]) -> int:
    """FLOPs of ``work`` (forward and any backward it runs), as ``FlopCounterMode`` counts them."""
    with FlopCounterMode(display=False) as counter:
        work()
    return int(counter.get_total_flops())


def image_flops(model: nn.Module, data: TensorSplit, engine: Engine, step: int | None) -> int:
    """FLOPs of the model's forward pass (eval mode) on one image of ``data``, at time ``step``
    for a joint model: the cost of one prediction."""
    was_training = model.training
    model.eval()
    image = scale_images(data.x[:1].to(next(model.parameters()).device), engine)
    try:
        with torch.no_grad():
            return counted_flops(lambda: run_model(model, image, step))
    finally:
        model.train(was_training)


@dataclass(frozen=True)
class FitCost:
    """FLOPs of training epochs 1, 2, … (``train_epochs``; every later epoch costs the last
    one's, so a fit whose trained parameters never change has one entry), of one validation
    pass, and of one image's forward pass."""

    train_epochs: tuple[int, ...]
    valid_pass: int
    per_image: int

    def train_flops(self, epochs: int) -> int:
        """FLOPs of training ``epochs`` epochs from the start of a fit."""
        last = len(self.train_epochs) - 1
        return sum(self.train_epochs[min(e, last)] for e in range(epochs))

    def of_trials(self, trials: Sequence[TrialRecord]) -> tuple[int, int]:
        """(training, validation) FLOPs of every trial of a study: the epochs each ran, and a
        validation pass for each epoch plus the one before training."""
        epochs = [max(0, len(t.valid_curve) - 1) for t in trials]
        passes = [len(t.valid_curve) for t in trials]
        return sum(self.train_flops(e) for e in epochs), self.valid_pass * sum(passes)


def _counted_batches(task: Task, engine: Engine, device: torch.device) -> list[Batch]:
    """The batches a counted step trains on: the first images of each domain, at most a batch
    and :data:`COUNTED_BATCH` of them, as the loop hands them to the loss."""
    batches = []
    for index, domain in enumerate(task.domains):
        size = min(COUNTED_BATCH, engine.batch_size, len(domain))
        batches.append(Batch(
            scale_images(domain.x[:size].to(device), engine), domain.y[:size].to(device),
            None if domain.weight is None else domain.weight[:size].to(device),
            None if task.steps is None else task.steps[index],
            1.0 if task.step_weights is None else task.step_weights[index],
        ))  # fmt: skip
    return batches


def fit_cost(
    model: nn.Module,
    task: Task,
    hp: HyperParameters,
    engine: Engine,
    max_epochs: int = 1,
) -> FitCost:
    """Count one training step of ``model`` on ``task`` (a copy's gradients, the optimiser's
    step included where it re-evaluates the loss; up to :data:`COUNTED_BATCH` images per
    domain) and one forward pass, and scale them to an epoch and a validation pass.

    The step is counted with the parameters that actually train: the task's ``trainable``, then
    what the callbacks' ``before_fit`` and ``before_epoch`` leave trainable, for every epoch up
    to ``max_epochs`` whose trained parameters differ from the epoch before (a model wrapper's
    phases). ``after_fit`` ends the count, so whatever a callback installed is removed."""
    model = copy.deepcopy(model)  # its BN statistics and gradients move while counting
    hp = task.checked_hyperparameters(hp)
    if task.trainable is not None:
        choose_trainable(model, task.trainable)  # frozen layers' weight gradients are not computed
    device = next(model.parameters()).device
    batches = _counted_batches(task, engine, device)
    drawn = sum(len(batch.y) for batch in batches)
    generator = torch.Generator(device).manual_seed(0)
    parameters, optimizer = build_optimizer(task.optimizer_recipe, model, hp)
    state = FitState(
        model, parameters, optimizer, torch.amp.GradScaler(device.type, enabled=False), engine,
        hp, generator, [domain.to(device) for domain in task.domains], batches=batches,
    )  # fmt: skip

    def closure() -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        with autocast(engine, device):
            loss, *_ = objective_loss(model, batches, task, hp, generator)
        loss.backward()
        return loss

    def train_step() -> None:
        closure()
        if task.optimizer_recipe.takes_closure:
            optimizer.step(closure)  # type: ignore[arg-type]  # torch's closures return the loss tensor

    start_callbacks(task.callbacks, state)  # a term may read what its callback sets up (LwF's)
    try:
        schedule = EpochSchedule.of(task.domains, engine)  # the loop's epochs, as it runs them
        steps, per_epoch = schedule.batches, schedule.images
        epochs: list[int] = []
        counted: tuple[bool, ...] = ()
        for epoch in range(1, max_epochs + 1):
            begin_epoch(task.callbacks, state, epoch)
            trained = tuple(p.requires_grad for p in model.parameters())
            if trained == counted:
                continue
            model.train()
            step_flops = counted_flops(train_step)
            extra = sum(c.extra_train_flops(model, engine, steps) for c in task.callbacks)
            epochs += epochs[-1:] * (epoch - 1 - len(epochs))  # the epochs that changed nothing
            epochs.append(round(step_flops * per_epoch / drawn + extra))  # extra: A-GEM's
            counted = trained
        per_image = image_flops(model, task.valid, engine, task.valid_step)
    except BaseException:
        end_callbacks(task.callbacks, state, leaving=True)
        raise
    end_callbacks(task.callbacks, state, leaving=False)
    return FitCost(train_epochs=tuple(epochs), valid_pass=per_image * len(task.valid),
                   per_image=per_image)  # fmt: skip
