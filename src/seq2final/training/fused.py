"""Fused trials: K configurations of one fit trained together as one stacked model.

Every fit is a search over configurations of the same model on the same data, and on a GPU one
small model leaves the device mostly idle. Here the K models' parameters and buffers (BatchNorm
statistics included) are stacked along a leading axis (:func:`torch.func.stack_module_state`) and
run with :func:`torch.func.functional_call` under :func:`torch.vmap`, so one kernel launch serves
all K. Each model keeps what it would have alone (:func:`seq2final.training.loop.fit` is the
reference):

* its own learning rate, L2 weight, dropout rate and penalty weights (per-model tensors);
* its own seed: its own generator draws its batch order (each model gathers its own batch
  indices) and IRM permutations, and its own augmenter its augmentation, exactly as its single
  fit would; dropout masks are drawn per model but from the stack's stream (seeded by the first
  trial's seed), so only at dropout 0 do the two agree;
* its own Adam state, early stopping, best-epoch selection and pruning: a model that stops is
  taken out of the stack (no update, no BN change afterwards) and the rest train on.

At dropout 0 the fused results equal K single fits to float tolerance (batched convolutions sum
in another order); the tests check selected epochs, accuracies and weights.

It is built from the single fit's public parts (:mod:`seq2final.training.loop`: the batch order,
the training images with their augmentation, the training mode) and shares with it what
:mod:`seq2final.training.epochs` holds (the epoch's schedule, each epoch's record and
selection, the model handed back); whether a fit
can fuse is :func:`~seq2final.training.engine.unfusable`'s answer. What is its own is what a stack
needs: one Adam update of every model at once, each with its own learning rate (Adam's update is
the one :class:`torch.optim.Adam` makes, checked by the tests against single fits), and one
validation pass of every model under ``vmap``.
"""

from __future__ import annotations

import copy
import math
import pickle
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import optuna
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, stack_module_state

from seq2final.core.errors import Seq2FinalError
from seq2final.core.files import atomic_write
from seq2final.models import choose_trainable, set_dropout
from seq2final.training.augment import Augmenter
from seq2final.training.engine import (
    Engine,
    autocast,
    pick_fast_kernels,
    scale_images,
    unfusable,
)
from seq2final.training.epochs import EpochLog, EpochSchedule, FitResult, hand_back
from seq2final.training.hyperparameters import HyperParameters
from seq2final.training.loop import BatchOrder, EpochCallback, train_mode, training_images
from seq2final.training.objectives import Task, objective_loss
from seq2final.training.paused import PAUSED_LAYOUT, global_rng, load_paused, restore_global_rng
from seq2final.training.rules import Selection
from seq2final.training.tensors import TensorSplit
from seq2final.training.terms import Batch, LossTerm

BETAS, EPS = (0.9, 0.999), 1e-8  # torch.optim.Adam's defaults, as every single fit uses


StopCallback = Callable[[FitResult, dict[str, torch.Tensor]], None]


@dataclass
class FusedTrial:
    """One configuration of a fused fit: its values, its seed, its per-epoch callback (raising
    :class:`optuna.TrialPruned` there takes the model out of the stack) and its stop callback,
    given the model's result and selected weights as soon as it leaves the stack (so a tuner
    records a finished trial while the others still train)."""

    hp: HyperParameters
    seed: int
    on_epoch: EpochCallback | None = None
    on_stop: StopCallback | None = None


@dataclass
class _Member:
    """The bookkeeping of one stacked model (the tensors live in the stack)."""

    index: int
    trial: FusedTrial
    generator: torch.Generator
    orders: list[BatchOrder]
    augmenter: Augmenter
    log: EpochLog
    pruned: bool = False


class _Stack:
    """The active models' stacked parameters, buffers, Adam state and per-model values."""

    def __init__(self, models: Sequence[nn.Module], members: list[_Member]) -> None:
        params, buffers = stack_module_state(models)
        trainable = {name for name, p in models[0].named_parameters() if p.requires_grad}
        self.params = {
            name: value.detach().requires_grad_(name in trainable) for name, value in params.items()
        }
        self.trained = [name for name in self.params if name in trainable]
        self.buffers = {name: value.detach() for name, value in buffers.items()}
        self.exp_avg = {name: torch.zeros_like(self.params[name]) for name in self.trained}
        self.exp_avg_sq = {name: torch.zeros_like(self.params[name]) for name in self.trained}
        self.members = members
        device = next(iter(self.params.values())).device
        self.values = {
            name: torch.tensor([m.trial.hp[name] for m in members], device=device)
            for name in members[0].trial.hp
        }
        self.updates = 0

    def keep(self, kept: list[int]) -> None:
        """Keep only the models at these positions (the others stopped or were pruned)."""
        index = torch.tensor(kept, dtype=torch.long, device=next(iter(self.params.values())).device)
        self.params = {
            name: value.detach().index_select(0, index).requires_grad_(value.requires_grad)
            for name, value in self.params.items()
        }
        self.buffers = {name: value.index_select(0, index) for name, value in self.buffers.items()}
        for state in (self.exp_avg, self.exp_avg_sq):
            for name in state:
                state[name] = state[name].index_select(0, index)
        self.values = {name: value.index_select(0, index) for name, value in self.values.items()}
        self.members = [self.members[i] for i in kept]

    def adam_update(self) -> None:
        """One Adam update of every model at once, each with its own learning rate (the update
        of :class:`torch.optim.Adam`, in a few foreach kernels over the stacked tensors)."""
        self.updates += 1
        params = [self.params[name] for name in self.trained]
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        exp_avg = [self.exp_avg[name] for name in self.trained]
        exp_avg_sq = [self.exp_avg_sq[name] for name in self.trained]
        beta1, beta2 = BETAS
        torch._foreach_lerp_(exp_avg, grads, 1 - beta1)
        torch._foreach_mul_(exp_avg_sq, beta2)
        torch._foreach_addcmul_(exp_avg_sq, grads, grads, 1 - beta2)
        correction1 = 1 - beta1**self.updates
        correction2_sqrt = math.sqrt(1 - beta2**self.updates)
        denominators = torch._foreach_sqrt(exp_avg_sq)
        torch._foreach_div_(denominators, correction2_sqrt)
        torch._foreach_add_(denominators, EPS)
        updates = torch._foreach_div(exp_avg, denominators)
        step_sizes = self.values["lr"] / correction1
        shaped = [step_sizes.view(-1, *([1] * (p.dim() - 1))) for p in params]
        torch._foreach_mul_(updates, shaped)
        with torch.no_grad():
            torch._foreach_sub_(params, updates)
        for p in params:
            p.grad = None

    def state_of(self, position: int) -> dict[str, torch.Tensor]:
        """Model ``position``'s parameters and buffers, copied out of the stack."""
        return {
            name: value[position].detach().clone()
            for name, value in (*self.params.items(), *self.buffers.items())
        }


class _Objective(nn.Module):
    """One model's objective as a module, so :func:`functional_call` can run it on a slice of
    the stack (the penalties read the swapped-in parameters too)."""

    def __init__(self, model: nn.Module, task: Task) -> None:
        super().__init__()
        self.model = model
        self.task = task

    def forward(
        self, batches: list[Batch], hp: HyperParameters
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        set_dropout(self.model, hp.dropout)
        loss, ce_sum, correct, _ = objective_loss(self.model, batches, self.task, hp, None)
        return loss, ce_sum, correct


_NOT_SAVED = ("task", "engine", "domains", "valid", "base", "stacked", "batched")
"""What a paused stack's file leaves out: the data and settings :meth:`FusedRun.load` is given
again, and the structure and vmapped step it rebuilds from them."""


class FusedRun:
    """K configurations of one fit as one stacked model that can stop after any epoch and go on,
    in this process or, through :meth:`save` and :meth:`load`, in another: what
    :class:`~seq2final.training.loop.FitRun` is to one fit. Synchronous halving trains a grid as
    one stack to each rung and takes the configurations a rung leaves behind out of it
    (:meth:`drop`). ``labels``: what the caller calls each model (a tuner: its grid order)."""

    def __init__(
        self,
        models: Sequence[nn.Module],
        task: Task,
        trials: list[FusedTrial],
        engine: Engine,
        max_epochs: int,
        labels: Sequence[int] | None = None,
    ) -> None:
        if len(models) != len(trials) or not models:
            raise Seq2FinalError(
                f"fit_fused needs one trial per model, got {len(trials)} for {len(models)} model(s)"
            )
        unsupported = unfusable(engine, task)
        if unsupported:
            raise Seq2FinalError(
                f"fused fits cannot train this fit: {', '.join(unsupported)} cannot run in a "
                "stack; train its trials one at a time (training.fuse: 1)"
            )
        device = next(models[0].parameters()).device
        pick_fast_kernels(device)
        torch.manual_seed(trials[0].seed)  # the stack's stream of dropout masks
        self.flags = [{name: p.requires_grad for name, p in m.named_parameters()} for m in models]
        for model in models:
            if task.trainable is not None:
                choose_trainable(model, task.trainable)
            train_mode(model, engine)
        if not any(p.requires_grad for p in models[0].parameters()):
            raise Seq2FinalError("nothing to train: every parameter of the model is frozen")
        self.models, self.max_epochs, self.epoch = list(models), max_epochs, 0
        self.layout = PAUSED_LAYOUT  # what load_paused checks
        self.labels = list(range(len(models)) if labels is None else labels)
        self._attach(task, engine)
        trials = [replace(t, hp=task.checked_hyperparameters(t.hp)) for t in trials]
        self.members = []
        for index, trial in enumerate(trials):
            generator = torch.Generator(device).manual_seed(trial.seed)
            orders = [BatchOrder(len(d), engine.batch_size, generator) for d in self.domains]
            augmenter = Augmenter(engine.augment, self.valid.image_size, trial.seed)
            self.members.append(_Member(index, trial, generator, orders, augmenter,
                                        EpochLog(Selection(engine.patience))))  # fmt: skip
        self.stack = _Stack(models, list(self.members))
        self.global_rng: list[torch.Tensor] | None = None  # the global states while paused

    def _attach(self, task: Task, engine: Engine) -> None:
        """The parts a paused stack's file leaves out, from its task and engine."""
        self.device = device = next(self.models[0].parameters()).device
        self.task, self.engine = task, engine
        self.base = copy.deepcopy(self.models[0]).to("meta")  # the values come from the stack
        self.stacked = stacked = _Objective(self.base, task)
        self.domains = [d.to(device) for d in task.domains]
        self.valid = task.valid.to(device)
        steps = task.steps or [None] * len(self.domains)
        weights = task.step_weights or [1.0] * len(self.domains)

        def one_model(params, buffers, values, xs, ys, ws, drawn):  # noqa: ANN001, ANN202
            batches = [  # ws, drawn: only the domains that have them (vmap takes tensors only)
                Batch(x, y, ws.get(d), step, loss_weight, drawn.get(d))
                for d, (x, y, step, loss_weight) in enumerate(
                    zip(xs, ys, steps, weights, strict=True)
                )
            ]
            named = {f"model.{k}": v for k, v in (*params.items(), *buffers.items())}
            return functional_call(stacked, named, (batches, HyperParameters(values)))

        self.batched = torch.vmap(one_model, randomness="different")

    @property
    def trials(self) -> dict[int, FusedTrial]:
        """Each model's trial by label (set a callback on one after :meth:`load`)."""
        return {self.labels[m.index]: m.trial for m in self.members}

    def curves(self) -> dict[int, list[float]]:
        """Each model's validation accuracies so far (epoch 0 first), by label."""
        return {self.labels[m.index]: [row["valid_accuracy"] for row in m.log.history]
                for m in self.members}  # fmt: skip

    @property
    def training(self) -> list[int]:
        """The labels of the models still in the stack."""
        return [self.labels[m.index] for m in self.stack.members]

    def drop(self, labels: Collection[int]) -> None:
        """Take these models out of the stack, as pruned: they train no more and have no result."""
        kept = []
        for position, member in enumerate(self.stack.members):
            if self.labels[member.index] in labels:
                member.pruned, member.log.best_state = True, None  # no result: no weights kept
            else:
                kept.append(position)
        if len(kept) < len(self.stack.members):
            self.stack.keep(kept)

    def run(self, until: int | None = None) -> list[FitResult | None] | None:
        """Train the stack up to epoch ``until`` (every epoch the stopping rules allow when
        None): once every model has left it, each one's selected epoch loaded into its model and
        its :class:`FitResult` (``None`` for a pruned one); ``None`` while models still train."""
        if self.global_rng is not None:  # another fit may have drawn from it while paused
            restore_global_rng(self.global_rng, self.device)
            self.global_rng = None
        stack, base, engine, device = self.stack, self.base, self.engine, self.device
        batches_per_epoch = EpochSchedule.of(self.domains, engine).batches
        try:
            if not self.members[0].log.history:
                scores = _validate(stack, base, self.valid, self.task.valid_step, engine)
                _after_epoch(stack, scores, 0)
            last = self.max_epochs if until is None else min(until, self.max_epochs)
            while stack.members and self.epoch < last:
                self.epoch = epoch = self.epoch + 1
                ce_sum = torch.zeros(len(stack.members), dtype=torch.float64, device=device)
                correct = torch.zeros(len(stack.members), dtype=torch.int64, device=device)
                count = 0
                train_mode(base, engine)
                for _ in range(batches_per_epoch):
                    xs, ys, ws, drawn = _gather(stack.members, self.domains, self.task, engine)
                    with autocast(engine, device):
                        loss, batch_ce, batch_correct = self.batched(
                            stack.params, stack.buffers, stack.values, xs, ys,
                            {d: w for d, w in enumerate(ws) if w is not None},
                            {d: o for d, o in enumerate(drawn) if o is not None},
                        )  # fmt: skip
                    loss.sum().backward()  # the models' losses are independent: one backward
                    stack.adam_update()
                    ce_sum += batch_ce.detach()
                    correct += batch_correct
                    count += sum(len(y[0]) for y in ys)
                set_dropout(base, 0.0)
                scores = _validate(stack, base, self.valid, self.task.valid_step, engine)
                train = (ce_sum / count, correct / count)
                _after_epoch(stack, scores, epoch, train, last=epoch == self.max_epochs)
        finally:
            set_dropout(base, 0.0)
        if stack.members:  # paused: what dropout draws from goes with the stack
            self.global_rng = global_rng(device)
            return None
        results: list[FitResult | None] = []
        for model, member, flag in zip(self.models, self.members, self.flags, strict=True):
            hand_back(model, flag, float(member.trial.hp.dropout), member.log.best_state)
            results.append(None if member.pruned else member.log.result())
        return results

    def save(self, path: Path) -> None:
        """Write the paused stack to ``path`` (atomically): everything but its data, settings
        and callbacks, which :meth:`load` and the caller give again."""
        if self.global_rng is None:
            raise Seq2FinalError("only a paused stack can be saved; run it to a rung first")
        kept = {name: getattr(self, name) for name in _NOT_SAVED}
        callbacks = [(m.trial.on_epoch, m.trial.on_stop) for m in self.members]
        try:
            for name in _NOT_SAVED:
                setattr(self, name, None)
            for member in self.members:
                member.trial.on_epoch = member.trial.on_stop = None
            atomic_write(path, lambda partial: torch.save(self, partial))
        except (pickle.PicklingError, TypeError, AttributeError, RuntimeError) as error:
            raise Seq2FinalError(
                f"this stack cannot be paused to a file ({error}); a halving budget continues "
                "only fits that pickle; valid for it: training.fuse 1, or another pruner"
            ) from None
        finally:
            for name, value in kept.items():
                setattr(self, name, value)
            for member, (on_epoch, on_stop) in zip(self.members, callbacks, strict=True):
                member.trial.on_epoch, member.trial.on_stop = on_epoch, on_stop

    @classmethod
    def load(cls, path: Path, task: Task, engine: Engine) -> FusedRun:
        """A stack :meth:`save` wrote, with its ``task`` and ``engine`` given again (its trials'
        callbacks are not kept: set them through :attr:`trials`). Loads a pickle: only for
        files this project wrote (a tuner's own checkpoints)."""
        run = load_paused(path, cls, "stack", "its trials")
        run._attach(task, engine)
        pick_fast_kernels(run.device)
        return run


def fit_fused(
    models: Sequence[nn.Module],
    task: Task,
    trials: list[FusedTrial],
    engine: Engine,
    max_epochs: int,
) -> list[FitResult | None]:
    """Train ``models`` (one architecture, on one device) in place as one stacked model, model
    k under ``trials[k]``; load each one's selected epoch into it and return its
    :class:`FitResult` (``None`` for a model its callback pruned)."""
    results = FusedRun(models, task, trials, engine, max_epochs).run()
    assert results is not None  # run to the end, every model has left the stack
    return results


def _gather(
    members: list[_Member], domains: list[TensorSplit], task: Task, engine: Engine
) -> tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor | None], list]:
    """Each model's next batch of every domain, stacked: images [K, B, ...] (augmented as a
    single fit's are), labels, weights and what the objective draws per batch (IRM's
    permutations), drawn from each model's generator in the order its single fit draws."""
    indices = [[order.next() for order in member.orders] for member in members]
    objective = task.objective
    assert isinstance(objective, LossTerm)
    per_model = [
        [objective.draw(len(i), m.generator) for i in own]
        for m, own in zip(members, indices, strict=True)
    ]
    drawn = [_stacked([own[d] for own in per_model]) for d in range(len(domains))]
    xs, ys, ws = [], [], []
    for d, domain in enumerate(domains):
        index = torch.stack([own[d] for own in indices])
        if engine.augment == "none":  # one gather for the stack
            xs.append(scale_images(domain.x[index], engine))
        else:  # each model's images through its own augmenter, as its single fit's
            xs.append(torch.stack([training_images(domain, own[d], m.augmenter, engine)
                                   for m, own in zip(members, indices, strict=True)]))  # fmt: skip
        ys.append(domain.y[index])
        ws.append(None if domain.weight is None else domain.weight[index])
    return xs, ys, ws, drawn


def _stacked(draws: list[torch.Tensor | None]) -> torch.Tensor | None:
    """One domain's draws of every model, stacked (``None``: the objective draws nothing)."""
    present = [draw for draw in draws if draw is not None]
    if present and len(present) != len(draws):
        raise Seq2FinalError("an objective drew for some models of a stack and not for others")
    return torch.stack(present) if present else None


@torch.no_grad()
def _validate(
    stack: _Stack, base: nn.Module, valid: TensorSplit, step: int | None, engine: Engine
) -> torch.Tensor:
    """Every model's validation loss and accuracy, as a [2, K] tensor on the device."""
    was_training = base.training
    base.eval()

    def logits_of(params, buffers, x):  # noqa: ANN001, ANN202
        args = (x,) if step is None else (x, step)
        return functional_call(base, (params, buffers), args).float()

    try:
        outputs = []
        for start in range(0, len(valid), engine.eval_batch_size):
            x = scale_images(valid.x[start : start + engine.eval_batch_size], engine)
            with autocast(engine, x.device):
                outputs.append(
                    torch.vmap(logits_of, in_dims=(0, 0, None))(stack.params, stack.buffers, x)
                )
    finally:
        base.train(was_training)
    logits = torch.cat(outputs, dim=1)  # [K, N, classes]
    loss = torch.vmap(lambda scores: F.cross_entropy(scores, valid.y))(logits)
    accuracy = (logits.argmax(-1) == valid.y).float().mean(1)
    return torch.stack([loss, accuracy])


def _after_epoch(
    stack: _Stack,
    scores: torch.Tensor,
    epoch: int,
    train: tuple[torch.Tensor, torch.Tensor] | None = None,
    last: bool = False,
) -> None:
    """Record, select, stop and prune per model, as a single fit does after each epoch; the
    models that stopped (all of them after the ``last`` epoch) or were pruned leave the stack,
    and each one that stopped is handed to its trial's stop callback."""
    if train is None:
        table = scores.tolist()  # the one read of this epoch
        losses, accuracies = table
        train_losses = train_accuracies = [math.nan] * len(accuracies)
    else:
        table = torch.cat([scores.double(), torch.stack(train).double()]).tolist()
        losses, accuracies, train_losses, train_accuracies = table
    kept = []
    for position, member in enumerate(stack.members):
        accuracy = accuracies[position]
        train_metrics = (train_losses[position], train_accuracies[position])
        if member.log.record(epoch, train_metrics, losses[position], accuracy):
            member.log.best_state = stack.state_of(position)
        try:
            if member.trial.on_epoch is not None:
                member.trial.on_epoch(epoch, accuracy)
        except optuna.TrialPruned:
            member.pruned = True
            continue
        if not member.log.stopped and not last:
            kept.append(position)
        elif member.trial.on_stop is not None:
            assert member.log.best_state is not None  # epoch 0 is always selected first
            member.trial.on_stop(member.log.result(), member.log.best_state)
    if len(kept) < len(stack.members):
        stack.keep(kept)
