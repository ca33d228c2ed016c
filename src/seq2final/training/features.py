"""Head fits on cached features: a frozen body's output computed once per fit, as NED does.

A fit that trains the head ``fc`` alone (linear probing, Prototype Tuning, LP-FT's probe, the LP
data-efficiency curves) runs the whole network forward on every batch of every epoch in the
loop (:func:`seq2final.training.loop.fit`), although the body's output never changes when:

* only ``fc`` trains (``Task.trainable`` is ``["fc"]``) and the model is a plain
  :class:`~seq2final.models.BlockModel` of known layers (BN, convolutions, pools, ReLUs);
* the body's BatchNorm normalises by its running statistics (``Engine.freeze_bn_stats``), which
  then stay fixed, so an image's features do not depend on its batch;
* no augmentation draws new training images (``Engine.augment`` off);
* no dropout: the fit's rate applies after every block, the body's too (``dropout`` 0);
* the loss reads the head's logits and parameters alone (ERM, the L2 term, a pull towards
  anchors) and every callback only the optimiser and the validation results
  (:attr:`~seq2final.training.callbacks.FitCallback.feature_safe`; no batch transform).

Then :func:`fit_on_features` computes the input of ``fc`` once for the training and validation
images (eval mode, no gradients) and hands the loop ``fc`` alone, with the features as its
images: the seeded batch order, optimiser, loss, epoch-0 validation, selection, patience,
callbacks and history are the loop's own. On the CPU the features of an image are the same bits
in a batch of 100 as in one of 1,000, so the cached fit selects the same epoch with the same head
as the loop (``tests/training/test_features.py``; a head with a BatchNorm, DenseNet's, to float
noise). Under ``amp`` the head reads the features in float32 where the loop hands it the body's
half-precision output: the same to that precision. :func:`fit_cached` uses the cache where all
of the above hold and the loop otherwise, so no result changes on the CPU (under amp, or on
CUDA where the body runs at another batch size, to float tolerance); :func:`cache_refusal` says why
not. The FLOPs recorded for such a fit are still the loop's (every epoch's body passes): they
count the protocol's compute, not how this machine ran it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import torch
from torch import nn

from seq2final.core.errors import Seq2FinalError
from seq2final.models import BasicBlock, BlockModel, ConvBN, DenseBlock, Stem, set_dropout
from seq2final.training.engine import Engine, layer_inputs
from seq2final.training.epochs import FitResult
from seq2final.training.hyperparameters import HyperParameters
from seq2final.training.loop import EpochCallback, fit
from seq2final.training.objectives import Task
from seq2final.training.tensors import TensorSplit
from seq2final.training.terms import L2, AnchorPull, Erm, LossTerm

HEAD = "fc"
"""The layer a cached fit trains: the head every block model ends in."""

_FIXED_LAYERS = (nn.Conv2d, nn.ReLU, nn.MaxPool2d, nn.AvgPool2d, nn.AdaptiveAvgPool2d,
                 nn.Identity, nn.Flatten, nn.Sequential, nn.ModuleDict, nn.ModuleList,
                 Stem, ConvBN, BasicBlock, DenseBlock)  # fmt: skip
"""Body layers whose forward is the same in training and eval mode (and on any batch)."""
_DENSE_PARTS = {
    "torchvision.models.densenet._DenseLayer",
    "torchvision.models.densenet._Transition",
}


def _body_refusal(model: nn.Module, engine: Engine) -> str | None:
    """Why the body's output could change during a fit (or depend on the batch), or ``None``."""
    if type(model) is not BlockModel:
        return f"a {type(model).__name__}, not a plain block model"
    for name, module in model.named_modules():
        if not name or name == HEAD or name.startswith(f"{HEAD}."):
            continue
        kind = type(module)
        if kind in (nn.BatchNorm1d, nn.BatchNorm2d):
            if not engine.freeze_bn_stats:
                return "the body's BatchNorm statistics move (training.freeze_bn_stats is off)"
        elif f"{kind.__module__}.{kind.__qualname__}" in _DENSE_PARTS:
            if getattr(module, "drop_rate", 0.0):
                return f"dropout inside the body ({name})"
        elif kind not in _FIXED_LAYERS:
            return f"a body layer of unknown training behaviour ({name}: {kind.__name__})"
    return None


def _safe_term(term: LossTerm) -> bool:
    """Whether a loss term reads a step's logits and the head's parameters alone: ERM, the L2
    term and a registered pull as it comes (which reads each parameter by name, as
    :class:`_HeadModel` keeps them), not a subclass that computes anything else."""
    if type(term) in (Erm, L2):
        return True
    points = ("domain_loss", "combine", "penalty")
    return isinstance(term, AnchorPull) and all(
        getattr(type(term), point) is getattr(AnchorPull, point) for point in points
    )


def setup_refusal(task: Task, engine: Engine) -> str | None:
    """Why a fit of ``task`` under ``engine`` cannot train on cached features whatever its model
    and hyper-parameters, or ``None``: what a caller checks before choosing how to run trials."""
    trainable = task.trainable
    if not isinstance(trainable, list | tuple) or list(trainable) != [HEAD]:
        return f"the fit trains {'every layer' if trainable is None else trainable}"
    if engine.augment != "none":
        return f"augmentation ({engine.augment}) draws new training images"
    if task.steps is not None and any(s is not None for s in task.steps):
        return "a joint model's steps"
    terms = [t for t in task.loss_terms if not _safe_term(t)]
    if terms:
        return f"loss term '{terms[0].name}' may read more than the head's logits"
    callbacks = [c for c in task.callbacks if type(c).__dict__.get("feature_safe") is not True]
    if callbacks:
        return f"callback {type(callbacks[0]).__name__} is not declared feature_safe"
    return None


def cache_refusal(
    model: nn.Module, task: Task, hp: HyperParameters | None, engine: Engine
) -> str | None:
    """Why this fit cannot train its head on cached features without changing its result (one
    line), or ``None`` where it can (the module docstring's conditions); ``hp`` ``None``: for
    a trial without dropout (a tuner's choice of how to run its trials)."""
    refusal = setup_refusal(task, engine)
    if refusal is None and hp is not None and task.checked_hyperparameters(hp).dropout:
        refusal = "dropout, which the fit applies after every block of the body"
    return refusal or _body_refusal(model, engine)


class _HeadModel(nn.Module):
    """The head alone as the model a fit trains, its "images" the body's cached outputs. It
    holds the model's own ``fc`` under its own name, so the loop trains the model's head in
    place and a loss term finds ``fc.linear.weight`` as it would in the whole model."""

    def __init__(self, head: nn.Module) -> None:
        super().__init__()
        self.fc = head
        self.layer_names = (HEAD,)
        self.dropout = 0.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


def _features_of(model: nn.Module, split: TensorSplit, engine: Engine) -> TensorSplit:
    device = next(model.parameters()).device
    weight = None if split.weight is None else split.weight.to(device)
    features = layer_inputs(model, getattr(model, HEAD), split, engine)
    return TensorSplit(features, split.y.to(device), weight)


def fit_on_features(
    model: nn.Module,
    task: Task,
    hp: HyperParameters,
    engine: Engine,
    max_epochs: int,
    seed: int,
    on_epoch: EpochCallback | None = None,
    progress: Callable[[int], None] | None = None,
) -> FitResult:
    """:func:`~seq2final.training.loop.fit` of the head alone on the body's features, computed
    once: the same arguments and result (the selected head loaded into ``model``). One line
    where :func:`cache_refusal` finds a reason the result would differ.

    The loop itself trains the head: its model is ``fc`` alone and its training and validation
    "images" the features (fed as they are: ``input_scale`` raw), so its rules (the seeded batch
    order, optimiser, loss, selection, patience, callbacks and history) are the loop's by
    construction, not a copy of them."""
    refusal = cache_refusal(model, task, hp, engine)
    if refusal is not None:
        raise Seq2FinalError(f"a head fit on cached features would change the result: {refusal}")
    return _fit_head(model, task, hp, engine, max_epochs, seed, on_epoch, progress)


def _fit_head(
    model: nn.Module,
    task: Task,
    hp: HyperParameters,
    engine: Engine,
    max_epochs: int,
    seed: int,
    on_epoch: EpochCallback | None,
    progress: Callable[[int], None] | None,
) -> FitResult:
    """:func:`fit_on_features` once :func:`cache_refusal` has found nothing."""
    dropout = float(task.checked_hyperparameters(hp).dropout)
    head, cached, as_features = on_features(model, task, engine)
    try:
        return fit(head, cached, hp, as_features, max_epochs, seed, on_epoch, progress)
    finally:
        set_dropout(model, dropout)
        model.eval()


def on_features(model: nn.Module, task: Task, engine: Engine) -> tuple[nn.Module, Task, Engine]:
    """What the loop trains on cached features: the model's head alone (trained in place), the
    task with the body's outputs as its images, and the engine that feeds them as they are.
    A halving budget continues such a fit across rungs (a
    :class:`~seq2final.training.loop.FitRun` of these three), as the grid trains it."""
    if engine.channels_last:  # the model as the loop would hand it back
        model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]  # not in torch's stubs
    cached = replace(task, domains=[_features_of(model, d, engine) for d in task.domains],
                     valid=_features_of(model, task.valid, engine))  # fmt: skip
    as_features = engine.model_copy(update={"input_scale": "raw", "channels_last": False})
    return _HeadModel(getattr(model, HEAD)), cached, as_features


def is_head(model: nn.Module) -> bool:
    """Whether ``model`` is a head :func:`on_features` made (its state is the head's alone)."""
    return isinstance(model, _HeadModel)


def fit_cached(
    model: nn.Module,
    task: Task,
    hp: HyperParameters,
    engine: Engine,
    max_epochs: int,
    seed: int,
    on_epoch: EpochCallback | None = None,
    progress: Callable[[int], None] | None = None,
    cache: bool = True,
) -> FitResult:
    """:func:`fit_on_features` where it computes what the loop would (:func:`cache_refusal`
    finds nothing) and ``cache`` is on; the loop's :func:`~seq2final.training.loop.fit`
    otherwise. ``cache`` off runs the loop always: the like-for-like comparison of the two."""
    if cache and cache_refusal(model, task, hp, engine) is None:
        return _fit_head(model, task, hp, engine, max_epochs, seed, on_epoch, progress)
    return fit(model, task, hp, engine, max_epochs, seed, on_epoch, progress)
