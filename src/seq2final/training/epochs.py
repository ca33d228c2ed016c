"""What every fit does around its updates, in one place for the three that run a fit's schedule:
the single fit (:class:`~seq2final.training.loop.FitRun`), the fused fit
(:class:`~seq2final.training.fused.FusedRun`) and the FLOP count
(:func:`~seq2final.training.flops.fit_cost`), so a change to one cannot leave another behind.

* :class:`EpochSchedule`: how many optimiser steps an epoch takes (the longest domain's batches;
  a shorter domain's batch order cycles) and how many images it draws;
* :func:`start_callbacks`, :func:`begin_epoch`, :func:`end_callbacks`: the callbacks' points
  that bound a fit and open each epoch (the parameters an epoch trains are set there);
* :class:`EpochLog`: one model's epochs, each a history row (:func:`epoch_row`) fed to its
  selection (:class:`~seq2final.training.rules.Selection`: which epoch is kept, when to stop),
  with the selected epoch's weights, and the fit's :class:`FitResult`;
* :func:`hand_back`: the model as a fit returns it, its selected weights loaded.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from seq2final.models import set_dropout
from seq2final.training.callbacks import FitCallback, FitState
from seq2final.training.engine import Engine
from seq2final.training.records import EpochRow
from seq2final.training.rules import Selection
from seq2final.training.tensors import TensorSplit

log = logging.getLogger(__name__)


@dataclass
class FitResult:
    """The selected epoch's model (loaded into the model passed in), the per-epoch history, and
    what the fit's callbacks kept at the selected epoch (SI's path integral ω up to it)."""

    valid_accuracy: float
    best_epoch: int
    epochs: int
    history: list[EpochRow]
    extras: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class EpochSchedule:
    """A fit's epoch: ``batches`` optimiser steps, each on the next batch of every domain (the
    longest domain's batches make the epoch; a shorter domain's order is reshuffled and cycles)."""

    batch_size: int
    domain_sizes: tuple[int, ...]

    @classmethod
    def of(cls, domains: Sequence[TensorSplit], engine: Engine) -> EpochSchedule:
        return cls(engine.batch_size, tuple(len(d) for d in domains))

    @property
    def batches(self) -> int:
        """Optimiser steps per epoch."""
        return max(math.ceil(n / self.batch_size) for n in self.domain_sizes)

    @property
    def images(self) -> float:
        """Images an epoch draws over every domain: each domain's batches average its size over
        its own batches, and an epoch takes :attr:`batches` of them."""
        return sum(self.batches * n / math.ceil(n / self.batch_size) for n in self.domain_sizes)


def start_callbacks(
    callbacks: Sequence[FitCallback], state: FitState, refused: Callable[[], None] | None = None
) -> None:
    """Every callback's ``before_fit``; where one refuses the fit (raises), ``refused()`` runs
    and the callbacks already started are ended, before the refusal goes on."""
    started: list[FitCallback] = []
    try:
        for callback in callbacks:
            callback.before_fit(state)
            started.append(callback)
    except BaseException:
        if refused is not None:
            refused()
        end_callbacks(started, state, leaving=True)
        raise


def begin_epoch(callbacks: Sequence[FitCallback], state: FitState, epoch: int) -> None:
    """Epoch ``epoch`` opens: every callback's ``before_epoch`` (a wrapper's phase sets what
    trains in it)."""
    state.epoch = epoch
    for callback in callbacks:
        callback.before_epoch(state)


def end_callbacks(callbacks: Sequence[FitCallback], state: FitState, leaving: bool) -> None:
    """Every callback's ``after_fit``, however the fit ends, so a callback removes what it
    installed. While an exception leaves the fit (a pruned trial, a refusal) one that fails is
    logged, and the fit's own exception goes on: a prune stays a prune."""
    for callback in callbacks:
        if not leaving:
            callback.after_fit(state)
            continue
        try:
            callback.after_fit(state)
        except Exception:
            log.exception("%s.after_fit failed as the fit stopped", type(callback).__name__)


def epoch_row(
    epoch: int, train_loss: float, train_acc: float, valid_loss: float, valid_acc: float
) -> EpochRow:
    """One epoch of a fit's history (epoch 0, before training, has no training metrics)."""
    return {
        "epoch": epoch,
        "train_loss": train_loss,
        "train_accuracy": train_acc,
        "valid_loss": valid_loss,
        "valid_accuracy": valid_acc,
    }


@dataclass
class EpochLog:
    """One model's epochs: its history, its selection and the selected epoch's weights (set by
    the fit, which knows where they live: its model, or its slice of a stack)."""

    selection: Selection
    history: list[EpochRow] = field(default_factory=list)
    best_state: dict[str, torch.Tensor] | None = None
    epochs: int = 0

    def record(
        self, epoch: int, train: tuple[float, float], valid_loss: float, valid_accuracy: float
    ) -> bool:
        """Epoch ``epoch``'s row (``train``: its training loss and accuracy, NaN at epoch 0),
        fed to the selection; whether it is the epoch now selected."""
        self.history.append(epoch_row(epoch, *train, valid_loss, valid_accuracy))
        self.epochs = epoch
        return self.selection.observe(epoch, valid_accuracy)

    @property
    def stopped(self) -> bool:
        """Whether the selection's patience has run out."""
        return self.selection.stopped

    def result(self, extras: dict[str, Any] | None = None) -> FitResult:
        """The fit's result so far: the selected epoch's accuracy, that epoch, the epochs run."""
        chosen = self.selection
        return FitResult(chosen.best_accuracy, chosen.best_epoch, self.epochs, self.history,
                         extras or {})  # fmt: skip


def hand_back(
    model: nn.Module,
    flags: dict[str, bool],
    dropout: float,
    selected: dict[str, torch.Tensor] | None = None,
) -> None:
    """The model as a fit hands it back: the ``selected`` epoch's weights loaded (where it has
    one), its trainable flags as they came, the fit's dropout rate (as a number, not a compiled
    step's tensor), in eval mode."""
    if selected:
        model.load_state_dict(selected)
    set_dropout(model, dropout)
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(flags[name])
    model.eval()
