"""Fit callbacks: what a method does at named points of the one fit loop.

The loop (:func:`seq2final.training.loop.fit`) calls every callback of its task at these points,
in the task's order:

=====================  ======================================================  ==============
point                  when                                                    times
=====================  ======================================================  ==============
``before_fit``         the optimiser exists, before epoch 0's validation       once
``before_eval``        before each validation (epoch 0's too); may replace     per epoch + 1
                       ``fit_state.eval_model``, the model validated
``after_eval``         the validation's ``valid_loss``/``valid_accuracy`` set  per epoch + 1
``on_selected``        an epoch became the selected one (epoch 0 included)     ≥ 1
``before_epoch``       before each training epoch                              per epoch
``transform_batch``    each domain's batch, before the forward pass            per batch, domain
``after_backward``     the batch's gradients exist, before the update          per pass
``before_update``      just before the optimiser's update                      per batch
``after_update``       just after the optimiser's update                       per batch
``after_epoch``        after each epoch's validation and selection             per epoch
``after_fit``          the selected epoch's weights are back in the model;     once
                       also when the fit stops early (a pruned trial), so a
                       callback removes here whatever it installed
=====================  ======================================================  ==============

The points are Avalanche's (its ``BaseSGDTemplate``), named for what this loop does. The model
validated is ``fit_state.eval_model``, the fit's model unless a ``before_eval`` replaces it (an
average of the weights: EMA, SWA); then that model is what validation, epoch selection, early
stopping, a tuner's ranking and pruning, and the fit's result see, and the selected epoch's
``eval_model`` is what the fit hands back (its state dict must load into the fit's model).
``after_backward`` runs once per backward pass: twice per update under an optimiser that
re-evaluates the loss in its step (:mod:`seq2final.training.optimizers`, SAM), whose last pass's
gradients are the ones the update uses, so a callback that edits gradients (A-GEM's projection)
does it there; ``before_update`` sees the first pass's, which such a step then replaces, and each
pass moves the BatchNorm statistics. From ``after_backward`` on, ``fit_state.batches`` and
``fit_state.loss`` are the step's batches and the last pass's loss (scaled under fp16).

The FLOP count (:func:`seq2final.training.flops.fit_cost`) runs a callback too, on a copy of the
model with no validation or update between: ``before_fit``, ``before_epoch`` for each epoch of
the budget (so it sees a phase's trained parameters), then ``after_fit``; a callback that keeps
state across fits is called these extra times.

A callback sees the fit through :class:`FitState`; what it keeps for the mode that asked for the
fit it writes into :attr:`FitState.extras` in :meth:`FitCallback.on_selected`, which the loop
copies into :attr:`FitResult.extras` (so it belongs to the selected epoch; writes elsewhere are
not kept). A fit with callbacks trains its trials one at a time: a fused stack takes one step for
all its models and calls none of them. A searched value belongs to a loss term; a callback that
needs one is a term too (docs/extending.md: LwF is both), so every hyper-parameter is declared
by a registered term and checked before any work.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import nn

from seq2final.training.engine import Engine
from seq2final.training.hyperparameters import HyperParameters
from seq2final.training.tensors import TensorSplit
from seq2final.training.terms import Batch


@dataclass
class FitState:
    """One fit as its callbacks see it. ``domains`` are the training domains on the device;
    ``epoch`` is 0 before training; ``scale`` is the gradient scaler's loss scaling (identity
    without fp16); ``unscale`` unscales the gradients in place (at most once per update).
    ``freeze_bn_stats``: set in ``before_epoch``, the coming epoch keeps the BatchNorm statistics
    of layers whose parameters are all frozen fixed, as ``Engine.freeze_bn_stats`` does for a
    whole fit (a model wrapper's phases with ``freeze_bn_stats``). ``valid_loss`` and
    ``valid_accuracy`` are the last validation's (epoch 0's before training), what a schedule
    reads in ``after_epoch``; ``stop`` set there ends the fit after that epoch, its selected
    epoch kept (a schedule that has run its course). ``eval_model``: the model the coming
    validation runs (the fit's ``model`` until a ``before_eval`` replaces it); ``batches`` and
    ``loss``: the current step's (the table above)."""

    model: nn.Module
    parameters: list[nn.Parameter]
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    engine: Engine
    hp: HyperParameters
    generator: torch.Generator
    domains: list[TensorSplit]
    epoch: int = 0
    extras: dict[str, Any] = field(default_factory=dict)
    freeze_bn_stats: bool = False
    valid_loss: float = float("nan")
    valid_accuracy: float = float("nan")
    stop: bool = False
    eval_model: nn.Module | None = None
    batches: list[Batch] = field(default_factory=list)
    loss: torch.Tensor | None = None

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        return self.scaler.scale(loss)

    def unscale(self) -> None:
        self.scaler.unscale_(self.optimizer)


RENAMED_POINTS = {"before_step": "before_update", "after_step": "after_update"}
"""Points renamed after 0.1.0 (a *step* is a time step of the sequence; the optimiser's is an update):
a callback that still defines an old name is warned when its class is made and is called at the
new point."""


class FitCallback:
    """Subclass and override the points you need (all do nothing by default).

    ``feature_safe``: it reads and sets only the optimiser, the epoch, the validation results
    and ``stop`` (a learning-rate schedule), never the batches, the gradients or the model, so a
    head fit on a frozen body's cached features may run it (:mod:`seq2final.training.features`);
    a fit with any other callback trains through the whole network. Declared on the class
    itself: a subclass, which may read more, declares it again."""

    feature_safe: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for old, new in RENAMED_POINTS.items():
            if old in cls.__dict__ and new not in cls.__dict__:
                warnings.warn(
                    f"{cls.__name__}.{old} is now {new}: define {new} instead (the old name "
                    "stops being called in a later release)",
                    DeprecationWarning,
                    stacklevel=2,
                )
                setattr(cls, new, cls.__dict__[old])

    def before_fit(self, fit_state: FitState) -> None:
        pass

    def before_eval(self, fit_state: FitState) -> None:
        pass

    def after_eval(self, fit_state: FitState) -> None:
        pass

    def on_selected(self, fit_state: FitState) -> None:
        pass

    def before_epoch(self, fit_state: FitState) -> None:
        pass

    def transform_batch(self, fit_state: FitState, domain: int, batch: Batch) -> Batch:
        return batch

    def after_backward(self, fit_state: FitState) -> None:
        pass

    def before_update(self, fit_state: FitState) -> None:
        pass

    def after_update(self, fit_state: FitState) -> None:
        pass

    def after_epoch(self, fit_state: FitState) -> None:
        pass

    def after_fit(self, fit_state: FitState) -> None:
        pass

    def extra_train_flops(self, model: nn.Module, engine: Engine, updates: int) -> float:
        """FLOPs an epoch of ``updates`` optimiser updates spends here beyond the loss's forward
        and backward passes (A-GEM's reference gradient), for the compute figures."""
        return 0.0
