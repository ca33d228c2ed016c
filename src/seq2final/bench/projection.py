"""The paper's whole protocol in device-hours, projected from measured per-architecture rates.

What the protocol trains is counted by running it: every method's states and jobs go through the
project's own training functions on the sequence, with each tuned fit recorded instead of trained (its
untrained model is handed on, so later stages see the shapes and data they would). A fit's work
is its grid size × its epochs × (training images per epoch, validation images per epoch). The
five paper sequences (clr, rcl, rrr, ttt, sss) have the same step sizes (6000, 4000, 6000, 4000
images), so one of them counts for all five. Epochs are the budget's ``max_epochs`` (100 under
``paper``): an upper bound, reached by every grid trial of the search section's runs on ``rcl``
(patience 6 against the previous epoch rarely fires).

Rates are measured here per architecture, on the device: training images/s of one fit, of a
stack of every size the protocol's grids split into (the tuner trains a fit's trials in stacks of
``width`` and one stack of what is left; a stack of one is a single fit), and evaluation images/s. Convolutional work per image does not
depend on which images they are, so random ones do.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from unittest import mock

import torch
from torch import nn

from seq2final.bench.fit_speed import synchronize, synthetic_split
from seq2final.bench.fused_speed import trials_of
from seq2final.config.checks import CheckedRun
from seq2final.data.sequence import ShiftSequence
from seq2final.methods import METHODS, HistoricalState
from seq2final.methods.context import Context
from seq2final.models import build_model
from seq2final.runs.execution import fit_job, historical_costs, train_state
from seq2final.runs.planner import plan_run
from seq2final.training.engine import Engine, predict_logits
from seq2final.training.fused import fit_fused
from seq2final.training.hyperparameters import HyperParameters
from seq2final.training.loop import fit
from seq2final.training.objectives import Task
from seq2final.training.records import FitRecord
from seq2final.training.search import SearchSpace

PAPER_SEQUENCES = ("clr", "rcl", "rrr", "ttt", "sss")


@dataclass(frozen=True)
class FitWork:
    """One tuned fit of the protocol: trials, epochs, images per epoch."""

    owner: str
    stage: str
    trials: int
    epochs: int
    train_images: int  # per trial and epoch
    valid_images: int  # per trial and epoch (and once before training)


def counted_fit(stage: str, trials: int) -> FitRecord:
    """The record of a fit counted and not trained: what a mode reads of its fits (the last
    one's validation accuracy) is there, and no compute is charged."""
    return FitRecord(stage=stage, params={}, valid_accuracy=0.0, best_epoch=0, epochs=0,
                     trials=trials, train_flops=0, eval_flops=0)  # fmt: skip


def count_fits(run: CheckedRun, sequence: ShiftSequence, arch: str) -> list[FitWork]:
    """Every tuned fit that ``run`` (checked on the ``paper`` budget) trains for the paper's 18
    methods on ``arch`` (the methods registered beyond the paper's are not part of its
    protocol)."""
    plans = [
        plan_run(run.asking(arch, name, None, None), "projection")
        for name, recipe in METHODS.items()
        if recipe.paper_class is not None
    ]
    work: list[FitWork] = []

    def record(
        ctx: Context, stage: str, space: SearchSpace, make_model: Callable[[], nn.Module],
        task: Task,
    ) -> nn.Module:  # fmt: skip
        batches = max(math.ceil(len(d) / ctx.engine.batch_size) for d in task.domains)
        images = batches * ctx.engine.batch_size * len(task.domains)
        trials = space.grid_size() if ctx.budget.sampler == "grid" else ctx.budget.trials or 1
        work.append(FitWork(ctx.owner_key, stage, trials, ctx.budget.max_epochs, images,
                            len(task.valid)))  # fmt: skip
        ctx.fits.append(counted_fit(stage, trials))
        model = make_model()
        model.eval()
        return model

    with mock.patch.object(Context, "tuned_fit", record):  # the tuner is never asked
        states: dict[str, HistoricalState] = {}
        jobs: set[str] = set()  # methods that share a job (st_1 = st_b on a ConvNet) count once
        for plan in plans:
            for state in plan.states:  # in dependency order: step 0 before the modes it starts
                if state.key not in states:  # a state shared by several methods trains once
                    states[state.key] = train_state(plan, state, sequence, states)[0]
            for job in plan.jobs:
                if job.key not in jobs:
                    jobs.add(job.key)
                    fit_job(
                        plan,
                        job,
                        sequence,
                        states.get(job.state_key or ""),
                        historical_costs(job.state_key, states.__getitem__),
                    )
    return work


def stack_sizes(trials: int, width: int) -> list[int]:
    """The stacks a fit of ``trials`` trials trains in under ``fuse: width``, as the tuner
    batches them: full stacks, then one of what is left."""
    return [width] * (trials // width) + ([trials % width] if trials % width else [])


@dataclass(frozen=True)
class Rates:
    """Images/s of one architecture on the device."""

    train: float  # one fit's training pass
    fused_train: dict[int, float]  # model-images/s of a stack, per stack size (above 1)
    evaluate: float  # evaluation (validation) pass, per model

    def stack(self, size: int) -> float:
        """Model-images/s of a stack of ``size`` (a stack of one is a single fit)."""
        return self.train if size == 1 else self.fused_train[size]


def measure_rates(arch: str, engine: Engine, sizes: Iterable[int], images: int) -> Rates:
    """Training images/s of one fit and of a fused stack of each of ``sizes`` (one epoch over
    ``images`` random images, validation on one image so it costs nothing, after a warm-up),
    and eval images/s."""
    device = engine.torch_device()
    train, tiny = synthetic_split(images, 0), synthetic_split(1, 1)
    task = Task([train], tiny)
    never_stops = engine.model_copy(update={"patience": 2})

    def timed(work: Callable[[], object]) -> float:
        work()  # warm-up
        synchronize(device)
        start = time.perf_counter()
        work()
        synchronize(device)
        return time.perf_counter() - start

    def one() -> object:
        torch.manual_seed(0)
        model = build_model(arch, 10).to(device)
        return fit(model, task, HyperParameters(lr=1e-3, weight_decay=1e-4, dropout=0.5),
                   never_stops, 1, 0)  # fmt: skip

    def stacked(size: int) -> object:
        torch.manual_seed(0)
        models = [build_model(arch, 10).to(device) for _ in range(size)]
        return fit_fused(models, task, trials_of(size), never_stops, 1)

    model = build_model(arch, 10).to(device)
    on_device = train.to(device)  # a fit's validation data stays on the device
    return Rates(
        train=images / timed(one),
        fused_train={
            size: size * images / timed(functools.partial(stacked, size))
            for size in sorted(set(sizes) - {1})
        },
        evaluate=images / timed(lambda: predict_logits(model, on_device, engine, on_device=True)),
    )


def device_hours(fits: list[FitWork], rates: Rates, width: int) -> dict[str, float]:
    """Hours for ``fits`` one trial at a time and with trials fused in stacks of at most
    ``width`` (evaluation per model in both: a fused stack evaluates its models under ``vmap``,
    counted at the single rate)."""
    train = sum(f.trials * f.epochs * f.train_images for f in fits)
    fused = sum(
        size * f.epochs * f.train_images / rates.stack(size)
        for f in fits
        for size in stack_sizes(f.trials, width)
    )
    valid = sum(f.trials * (f.epochs + 1) * f.valid_images for f in fits)
    evaluate = valid / rates.evaluate
    return {
        "sequential": (train / rates.train + evaluate) / 3600,
        "fused": (fused + evaluate) / 3600,
    }
