"""Data-efficiency curves: a model fine-tuned (FT) or probed (LP) on nested, log-spaced subsets of
a step's training set, tested on its test set (Feature Forgetting's P_rep protocol,
docs/representations.md).

Feature Forgetting evaluates a representation by fine-tuning it on training sets of 50, 100, ...,
1600 images of a held-out task and averaging the test accuracies (P_rep, its Eq. 1 and App. B.3),
with Adam at 10⁻³ whose learning rate is multiplied by 0.3 each time the loss stops improving, three
times (:class:`PlateauSchedule`). Here the held-out task is the final step: every historical state
gets one curve per kind, so "how much final data do I need, given this history?" reads off it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from seq2final.core.errors import Seq2FinalError
from seq2final.training.callbacks import FitCallback, FitState
from seq2final.training.engine import Engine, accuracy
from seq2final.training.features import fit_cached
from seq2final.training.flops import fit_cost
from seq2final.training.hyperparameters import HyperParameters
from seq2final.training.loop import clone_model
from seq2final.training.objectives import Task
from seq2final.training.tensors import TensorSplit

KINDS = {"ft": None, "lp": ["fc"]}
"""The curve kinds and what each trains: every layer (FT), or the head alone (LP, the body's
BatchNorm statistics fixed too: a probe of the representation as it is)."""
SCRATCH = "scratch"
"""The state label of the reference curve: a fresh model, no history."""

CURVE_SEMANTICS = 1
"""The version of what a curve point computes (the schedule, the subsets, what LP trains); bump
it with any change to them, so no stored point of the old code is reused."""


def doubling_sizes(available: int, first: int) -> list[int]:
    """``first``, 2·``first``, 4·``first``, ... up to the largest that ``available`` images hold."""
    if available < first:
        raise Seq2FinalError(
            f"a data-efficiency curve needs at least {first} training images on the final step; "
            f"it has {available}"
        )
    return [first * 2**k for k in range(int(math.log2(available / first)) + 1)]


def check_sizes(sizes: Sequence[int], available: int) -> list[int]:
    """``sizes`` sorted, each a whole number from 1 to ``available``; one line naming the first
    bad one otherwise."""
    for size in sizes:
        if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= available:
            raise Seq2FinalError(
                f"curve size {size!r}: valid: whole numbers from 1 to {available}, the final "
                "step's training images"
            )
    return sorted(set(sizes))


def nested_order(labels: np.ndarray, seed: int) -> np.ndarray:
    """A seeded order of the images whose every prefix is a training subset: classes take turns
    (each class's images shuffled, the classes in a new order every round), so the first n
    images hold every class as evenly as n allows and each size's subset contains every
    smaller one."""
    rng = np.random.default_rng(seed)
    queues = [rng.permutation(np.flatnonzero(labels == c)) for c in np.unique(labels)]
    turns = []
    for r in range(max(len(q) for q in queues)):
        turns += [queues[c][r] for c in rng.permutation(len(queues)) if r < len(queues[c])]
    return np.asarray(turns, dtype=np.int64)


class PlateauSchedule(FitCallback):
    """Feature Forgetting's evaluation optimiser: the fit's learning rate times ``factor`` each
    time the validation loss has not improved for more than ``patience`` epochs (torch's
    ``ReduceLROnPlateau``, which counts them), ``reductions`` times; the next plateau ends the
    fit."""

    feature_safe = True  # it reads the validation loss and sets the rate: a cached head fit runs it

    def __init__(self, factor: float = 0.3, reductions: int = 3, patience: int = 2) -> None:
        self.factor, self.reductions, self.patience = factor, reductions, patience

    def before_fit(self, fit_state: FitState) -> None:
        self.scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
            fit_state.optimizer, mode="min", factor=self.factor, patience=self.patience
        )
        self.made = 0

    def after_epoch(self, fit_state: FitState) -> None:
        before = fit_state.optimizer.param_groups[0]["lr"]
        self.scheduler.step(fit_state.valid_loss)
        if fit_state.optimizer.param_groups[0]["lr"] < before:
            self.made += 1
            fit_state.stop = self.made > self.reductions


@dataclass(frozen=True)
class CurvePoint:
    """One fit of a curve: its kind, training-set size, test accuracy, epochs and FLOPs."""

    kind: str
    size: int
    test_accuracy: float
    valid_accuracy: float
    epochs: int
    train_flops: int
    eval_flops: int


def curve_point(
    model: nn.Module,
    kind: str,
    train: TensorSplit,
    valid: TensorSplit,
    test: TensorSplit,
    engine: Engine,
    max_epochs: int,
    seed: int,
    patience: int = 2,
    cache_features: bool = True,
) -> CurvePoint:
    """Fit a copy of ``model`` on ``train`` as ``kind`` says, with :class:`PlateauSchedule` (Adam
    10⁻³, no dropout, no weight decay) selecting on ``valid``, at most ``max_epochs`` epochs,
    and test it on ``test``; LP keeps the body's BatchNorm statistics fixed. Its FLOPs are
    counted as a tuned fit's: every epoch run and every validation pass, and the test pass.

    LP trains the head on the body's features computed once (:mod:`seq2final.training.features`)
    where that computes what the loop would (no augmentation, a plain block model); the same
    point, several times faster. ``cache_features`` off runs every epoch through the whole
    network, as a comparison of the two does."""
    if kind not in KINDS:
        raise Seq2FinalError(f"curve kind '{kind}': valid: {', '.join(KINDS)}")
    start = clone_model(model).to(engine.torch_device())
    schedule = PlateauSchedule(patience=patience)
    task = Task([train], valid, trainable=KINDS[kind], callbacks=[schedule])
    hp = HyperParameters({"lr": 1e-3, "weight_decay": 0.0, "dropout": 0.0})
    cost = fit_cost(start, task, hp, engine, max_epochs)
    # only the schedule stops the fit (the epoch kept is the best on validation)
    fitting = engine.model_copy(update={"patience": max_epochs, "freeze_bn_stats": kind == "lp"})
    result = fit_cached(start, task, hp, fitting, max_epochs, seed, cache=cache_features)
    return CurvePoint(
        kind=kind,
        size=len(train),
        test_accuracy=accuracy(start, test, engine),
        valid_accuracy=result.valid_accuracy,
        epochs=result.epochs,
        train_flops=cost.train_flops(result.epochs),
        eval_flops=cost.valid_pass * (result.epochs + 1) + cost.per_image * len(test),
    )


def subset(split: TensorSplit, order: np.ndarray, size: int) -> TensorSplit:
    """The first ``size`` images of ``split`` in ``order``."""
    index = torch.as_tensor(np.sort(order[:size]))
    return TensorSplit(split.x[index], split.y[index])
