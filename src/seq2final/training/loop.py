"""One fit loop for every method of the benchmark.

Every method trains through :func:`fit`: what differs between methods is only the fit's
:class:`~seq2final.training.objectives.Task` — its data, its loss terms
(:mod:`seq2final.training.terms`) and its callbacks (:mod:`seq2final.training.callbacks`), called
at named points of this loop — so the loop keeps the original code's rules in one place
(docs/methods.md, "The fit loop"):

* a fresh optimiser per fit, Adam at a constant learning rate unless the task names another
  recipe (:mod:`seq2final.training.optimizers`), and the L2 penalty added to the loss (BN
  parameters excluded), not Adam's ``weight_decay``;
* the model stays in training mode, so frozen layers' BN statistics keep updating, unless
  ``freeze_bn_stats`` is set;
* which epoch is kept and when the fit stops: :mod:`seq2final.training.rules`, shared with the
  fused fit.

The fused fit (:mod:`seq2final.training.fused`) is built from this module's public parts (the
batch order, :class:`BatchOrder`; the training images of a batch with their augmentation,
:func:`training_images`; the training mode, :func:`train_mode`) and shares with it, and with the
FLOP count, what :mod:`seq2final.training.epochs` holds: the epoch's schedule, the callbacks'
start and end, each epoch's record and selection, and the model as a fit hands it back.

Unlike the original, one validation pass per epoch yields both loss and accuracy, and training
metrics accumulate during the training pass itself, so an epoch costs one pass over the training
data and one over the validation data. Data stay uint8 tensors (moved to the device once); a batch
is an index slice, scaled to float on the device.
"""

from __future__ import annotations

import copy
import logging
import math
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from seq2final.core.errors import Seq2FinalError
from seq2final.core.files import atomic_write
from seq2final.models import choose_trainable, set_dropout
from seq2final.training.augment import Augmenter
from seq2final.training.callbacks import FitState
from seq2final.training.engine import (
    Engine,
    autocast,
    pick_fast_kernels,
    predict_logits,
    scale_images,
)
from seq2final.training.epochs import (
    EpochLog,
    EpochSchedule,
    FitResult,
    begin_epoch,
    end_callbacks,
    hand_back,
    start_callbacks,
)
from seq2final.training.hyperparameters import HyperParameters
from seq2final.training.objectives import Task, objective_loss
from seq2final.training.optimizers import build_optimizer
from seq2final.training.paused import PAUSED_LAYOUT, global_rng, load_paused, restore_global_rng
from seq2final.training.rules import Selection
from seq2final.training.tensors import TensorSplit
from seq2final.training.terms import Batch

EpochCallback = Callable[[int, float], None]
log = logging.getLogger(__name__)


class BatchOrder:
    """Batches of one domain as index slices of a shuffled order, reshuffled when exhausted; the
    order is drawn on the generator's device, so a GPU fit never copies indices from the host."""

    def __init__(self, size: int, batch_size: int, generator: torch.Generator) -> None:
        self.size, self.batch_size, self.generator = size, batch_size, generator
        self.order = self._shuffled()
        self.position = 0

    def _shuffled(self) -> torch.Tensor:
        return torch.randperm(self.size, generator=self.generator, device=self.generator.device)

    def next(self) -> torch.Tensor:
        if self.position >= self.size:
            self.order = self._shuffled()
            self.position = 0
        indices = self.order[self.position : self.position + self.batch_size]
        self.position += self.batch_size
        return indices


def _validate(
    model: nn.Module, valid: TensorSplit, step: int | None, engine: Engine
) -> tuple[float, float]:
    """Validation loss and accuracy from data already on the model's device, read in one go."""
    logits = predict_logits(model, valid, engine, step, on_device=True)
    loss = F.cross_entropy(logits, valid.y)
    accuracy = (logits.argmax(1) == valid.y).float().mean()
    loss_value, accuracy_value = torch.stack([loss, accuracy]).tolist()
    return loss_value, accuracy_value


def training_images(
    domain: TensorSplit, index: torch.Tensor, augmenter: Augmenter, engine: Engine
) -> torch.Tensor:
    """One model's training images at ``index``, each through its own draw of the fit's
    augmentation (:mod:`seq2final.training.augment`), scaled for the model."""
    return scale_images(augmenter(domain.x[index]), engine)


def train_mode(model: nn.Module, engine: Engine, freeze_bn_stats: bool = False) -> None:
    """Training mode; where the engine or the coming epoch (``FitState.freeze_bn_stats``) asks,
    the BN layers whose parameters are all frozen keep their statistics fixed (eval mode)."""
    model.train()
    if engine.freeze_bn_stats or freeze_bn_stats:
        for module in model.modules():
            if isinstance(module, nn.modules.batchnorm._BatchNorm) and not any(
                p.requires_grad for p in module.parameters()
            ):
                module.eval()


def fit(
    model: nn.Module,
    task: Task,
    hp: HyperParameters,
    engine: Engine,
    max_epochs: int,
    seed: int,
    on_epoch: EpochCallback | None = None,
    progress: Callable[[int], None] | None = None,
) -> FitResult:
    """Train ``model`` in place on ``task`` and load the selected epoch's weights into it.

    ``hp`` is checked against what the task's loss terms and optimiser declare, missing values
    at their defaults. ``on_epoch(epoch, valid_accuracy)`` runs after every epoch's validation (a
    tuner reports to its pruner there and may raise to stop the fit); ``progress(1)`` after every
    epoch (a progress bar). The model must already be on its device.
    """
    result = FitRun(model, task, hp, engine, max_epochs, seed).run(None, on_epoch, progress)
    assert result is not None  # run to its end, never paused
    return result


_NOT_SAVED = ("task", "engine", "domains", "valid", "loss_of")
"""What a paused fit's file leaves out: the data and settings :meth:`FitRun.load` is given again,
and a compiled loss, which is compiled again."""


class FitRun:
    """One fit of :func:`fit`, which can stop after any epoch and go on later, in this process or,
    through :meth:`save` and :meth:`load`, in another: synchronous halving
    (:mod:`seq2final.training.halving`) trains a promoted configuration on from where its rung
    stopped it. A fit stopped at epoch *k* and continued computes what it computes uninterrupted:
    everything it draws from (its generator, the global random state dropout draws from, the batch
    orders, the augmentation's draws), the optimiser, the selection and the callbacks go with it.
    """

    def __init__(
        self,
        model: nn.Module,
        task: Task,
        hp: HyperParameters,
        engine: Engine,
        max_epochs: int,
        seed: int,
    ) -> None:
        hp = task.checked_hyperparameters(hp)
        recipe = task.optimizer_recipe
        if recipe.takes_closure and engine.amp == "fp16":
            raise Seq2FinalError(
                f"optimizer '{recipe.name}' steps with a closure, which the fp16 gradient scaler "
                "cannot run; valid: amp none or bf16 with it"
            )
        device = next(model.parameters()).device
        pick_fast_kernels(device)
        if engine.channels_last:
            model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]  # not in torch's stubs
        torch.manual_seed(seed)  # dropout and any other global draws
        # Batch orders and IRM's permutations are drawn on the device (no host copies on a GPU);
        # on the CPU this is the generator CPU fits always drew from.
        generator = torch.Generator(device).manual_seed(seed)
        self.flags = {name: p.requires_grad for name, p in model.named_parameters()}
        if task.trainable is not None:
            choose_trainable(model, task.trainable)
        set_dropout(model, hp.dropout)
        if not any(p.requires_grad for p in model.parameters()):
            hand_back(model, self.flags, float(hp.dropout))
            raise Seq2FinalError("nothing to train: every parameter of the model is frozen")
        self.model, self.task, self.hp, self.engine = model, task, hp, engine
        self.max_epochs, self.generator = max_epochs, generator
        parameters, self.optimizer = build_optimizer(recipe, model, hp)
        self.scaler = torch.amp.GradScaler(device.type, enabled=engine.amp == "fp16")
        self._attach(task, engine)
        self.orders = [BatchOrder(len(d), engine.batch_size, generator) for d in self.domains]
        self.augmenter = Augmenter(engine.augment, self.valid.image_size, seed)
        self.state = FitState(model, parameters, self.optimizer, self.scaler, engine, hp,
                              generator, self.domains)  # fmt: skip
        self.callbacks = task.callbacks
        self.epoch, self.layout = 0, PAUSED_LAYOUT
        self.log = EpochLog(Selection(engine.patience))
        self.best_extras: dict[str, Any] = {}
        self.global_rng: list[torch.Tensor] | None = None  # the global states while paused
        # a callback may refuse the fit (a wrapper's empty phase): the model goes back as it came
        start_callbacks(self.callbacks, self.state,
                        refused=lambda: hand_back(model, self.flags, float(hp.dropout)))  # fmt: skip

    def _attach(self, task: Task, engine: Engine) -> None:
        """The parts a paused fit's file leaves out, from its task and engine."""
        self.device = device = next(self.model.parameters()).device
        self.task, self.engine = task, engine
        self.domains = [d.to(device) for d in task.domains]
        self.valid = task.valid.to(device)  # on the device once, not once per epoch
        self.loss_of, self.loss_hp = objective_loss, self.hp
        if engine.compile:
            # The whole step (forward, loss, penalties) as one graph, with the hyper-parameters
            # and the dropout rate as tensors: as numbers each would be a guard, and every trial
            # of a study a recompilation. The last, shorter batch and a joint model's steps
            # compile once.
            self.loss_of = torch.compile(objective_loss)
            self.loss_hp = HyperParameters(
                {n: torch.tensor(v, device=device) for n, v in self.hp.items()}
            )
            set_dropout(self.model, self.loss_hp.dropout)

    @property
    def ended(self) -> bool:
        """Whether the stopping rule (patience, ``max_epochs``, a callback's ``stop``) has ended
        the fit; a paused fit that has not ended goes on when :meth:`run` is called again."""
        return self.epoch >= self.max_epochs or self.log.stopped or self.state.stop

    def run(
        self,
        until: int | None = None,
        on_epoch: EpochCallback | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> FitResult | None:
        """Train up to epoch ``until`` (every epoch the stopping rule allows when None); the
        result once the fit has ended, the selected epoch's weights loaded into the model, or
        None while it is paused (the model mid-training: continue it, or :meth:`save` it).
        ``on_epoch`` and ``progress`` as :func:`fit`'s, for the epochs this call trains."""
        model, state, callbacks = self.model, self.state, self.callbacks
        if self.global_rng is not None:  # another fit may have drawn from it while paused
            restore_global_rng(self.global_rng, self.device)
            self.global_rng = None
        try:
            if not self.log.history:
                valid_accuracy = self._evaluate()
                self.log.record(0, (math.nan, math.nan), state.valid_loss, valid_accuracy)
                self._keep_selected()
                if on_epoch is not None:
                    on_epoch(0, valid_accuracy)
            last = self.max_epochs if until is None else min(until, self.max_epochs)
            while not self.ended and self.epoch < last:
                self.epoch += 1
                self._train_epoch()
                valid_accuracy = self._evaluate()
                selected = self.log.record(self.epoch, self._train_metrics, state.valid_loss,
                                           valid_accuracy)  # fmt: skip
                if progress is not None:
                    progress(1)
                if selected:
                    self._keep_selected()
                for callback in callbacks:
                    callback.after_epoch(state)
                if on_epoch is not None:
                    on_epoch(self.epoch, valid_accuracy)
        except BaseException:  # a pruned trial too: the selected weights, and the callbacks ended
            hand_back(model, self.flags, float(self.hp.dropout), self.log.best_state)
            end_callbacks(callbacks, state, leaving=True)
            raise
        if not self.ended:  # paused: what dropout draws from goes with the fit
            self.global_rng = global_rng(self.device)
            return None
        assert self.log.best_state is not None
        hand_back(model, self.flags, float(self.hp.dropout), self.log.best_state)
        end_callbacks(callbacks, state, leaving=False)
        return self.log.result(self.best_extras)

    def save(self, path: Path) -> None:
        """Write the paused fit to ``path`` (atomically): everything but its data and settings,
        which :meth:`load` is given again. A pickle of the fit's objects, so that the model, the
        optimiser holding its parameters and the callbacks holding either stay one graph."""
        if self.global_rng is None:
            raise Seq2FinalError("only a paused fit can be saved; run it to a rung first")
        kept = {name: getattr(self, name) for name in _NOT_SAVED}
        state_data = (self.state.domains, self.state.engine, self.state.batches, self.state.loss)
        try:
            for name in _NOT_SAVED:
                setattr(self, name, None)
            self.state.domains, self.state.batches, self.state.loss = [], [], None
            setattr(self.state, "engine", None)  # noqa: B010 - restored below
            atomic_write(path, lambda partial: torch.save(self, partial))
        except (pickle.PicklingError, TypeError, AttributeError, RuntimeError) as error:
            raise Seq2FinalError(
                f"this fit cannot be paused to a file ({error}); a halving budget continues only "
                "fits whose callbacks pickle; valid for it: a budget with another pruner"
            ) from None
        finally:
            for name, value in kept.items():
                setattr(self, name, value)
            self.state.domains, self.state.engine, self.state.batches, self.state.loss = state_data

    @classmethod
    def load(cls, path: Path, task: Task, engine: Engine) -> FitRun:
        """A fit :meth:`save` wrote, with its ``task`` and ``engine`` given again. Loads a
        pickle: only for files this project wrote (a tuner's own checkpoints)."""
        run = load_paused(path, cls, "fit", "its trial")
        run._attach(task, engine)
        pick_fast_kernels(run.device)
        run.state.domains, run.state.engine = run.domains, engine
        return run

    def _train_epoch(self) -> None:
        """One epoch's updates; its training loss and accuracy in ``_train_metrics``."""
        state, engine, task = self.state, self.engine, self.task
        recipe = task.optimizer_recipe
        device = self.device
        begin_epoch(self.callbacks, state, self.epoch)
        train_mode(self.model, engine, state.freeze_bn_stats)
        steps = task.steps or [None] * len(self.domains)
        weights = task.step_weights or [1.0] * len(self.domains)
        ce_sum = torch.zeros((), dtype=torch.float64, device=device)
        correct = torch.zeros((), dtype=torch.int64, device=device)
        count = 0
        drawn_from: list[torch.Tensor] = []  # the generator's state before the step's first pass

        def closure() -> torch.Tensor:
            """The step's pass again, drawing what the first drew (IRM's permutation), so the
            loss re-evaluated is the same loss, and later batch orders are the ones a plain fit
            draws."""
            self.generator.set_state(drawn_from[0])
            return self._forward_backward()[0]

        for _ in range(EpochSchedule.of(self.domains, engine).batches):
            batches = []
            for d, (domain, order, step, loss_weight) in enumerate(
                zip(self.domains, self.orders, steps, weights, strict=True)
            ):
                index = order.next()
                weight = None if domain.weight is None else domain.weight[index]
                x = training_images(domain, index, self.augmenter, engine)
                batch = Batch(x, domain.y[index], weight, step, loss_weight)
                for callback in self.callbacks:
                    batch = callback.transform_batch(state, d, batch)
                batches.append(batch)
            state.batches = batches
            if recipe.takes_closure:
                drawn_from[:] = [self.generator.get_state()]
            _, batch_ce, batch_correct, batch_count = self._forward_backward()
            for callback in self.callbacks:
                callback.before_update(state)
            if recipe.takes_closure:
                self.optimizer.step(closure)  # type: ignore[arg-type]  # torch's closures return the loss tensor
            else:
                self.scaler.step(self.optimizer)
                self.scaler.update()
            for callback in self.callbacks:
                callback.after_update(state)
            ce_sum, correct, count = ce_sum + batch_ce, correct + batch_correct, count + batch_count
        self._train_metrics = (float(ce_sum) / count, float(correct) / count)

    def _forward_backward(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
        """One pass over the step's batches: the gradients of the whole loss, then the
        callbacks' ``after_backward``; an optimiser's closure is this pass again."""
        state, device = self.state, self.device
        self.optimizer.zero_grad(set_to_none=True)
        with autocast(self.engine, device):
            out = self.loss_of(self.model, state.batches, self.task, self.loss_hp, self.generator)
        self.scaler.scale(out[0]).backward()
        state.loss = out[0].detach()
        for callback in self.callbacks:
            callback.after_backward(state)
        return out

    def _evaluate(self) -> float:
        """Validate ``state.eval_model`` (the callbacks may replace the fit's model)."""
        state = self.state
        state.eval_model = self.model
        for callback in self.callbacks:
            callback.before_eval(state)
        state.valid_loss, state.valid_accuracy = _validate(
            state.eval_model, self.valid, self.task.valid_step, self.engine
        )
        for callback in self.callbacks:
            callback.after_eval(state)
        return state.valid_accuracy

    def _keep_selected(self) -> None:
        """The epoch just selected: its weights (the validated model's) and the callbacks'
        extras."""
        state = self.state
        self.log.best_state = _snapshot(
            self.model if state.eval_model is None else state.eval_model
        )
        self.best_extras = _kept(state, self.callbacks)


def _kept(state: FitState, callbacks: list) -> dict[str, Any]:
    """What the callbacks keep for the epoch just selected, copied out of the running fit."""
    state.extras = {}
    for callback in callbacks:
        callback.on_selected(state)
    return dict(state.extras)


def _snapshot(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def clone_model(model: nn.Module) -> nn.Module:
    """An independent copy (fits train in place; a tuner starts every trial from a copy)."""
    return copy.deepcopy(model)
