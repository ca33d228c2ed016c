"""The context a mode trains in: the sequence, the architecture, the engine and the tuner.

A mode (historical or final) gets a :class:`Context` and uses it for everything it needs: the
splits of a step, fresh models initialised reproducibly, and tuned fits whose records end up in
the job's result. A mode written against this class alone (plus :mod:`seq2final.training`) is
all a new method needs.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import torch
from torch import nn

from seq2final.core.errors import Seq2FinalError
from seq2final.core.progress import Reporter, current
from seq2final.core.seeds import derived_seed
from seq2final.data.sequence import ShiftSequence
from seq2final.models import build_model, set_dropout
from seq2final.training.engine import Engine, accuracy, fuse_width
from seq2final.training.epochs import FitResult
from seq2final.training.features import (
    cache_refusal,
    fit_cached,
    is_head,
    on_features,
    setup_refusal,
)
from seq2final.training.flops import fit_cost, image_flops
from seq2final.training.fused import FusedRun, FusedTrial, fit_fused
from seq2final.training.halving import previous_step
from seq2final.training.hyperparameters import HyperParameters
from seq2final.training.loop import FitRun, clone_model
from seq2final.training.objectives import Task
from seq2final.training.records import CurveRow, FitRecord
from seq2final.training.search import Budget, SearchSpace
from seq2final.training.tensors import TensorSplit
from seq2final.training.trials import Tuned
from seq2final.training.tuner import TrainStack, TrainTrial, TrialRun, Tuner

log = logging.getLogger(__name__)

M = TypeVar("M", bound=nn.Module)


@dataclass(frozen=True)
class GridFits:
    """A tuned fit's configurations as a ``halving`` budget trains them
    (:class:`~seq2final.training.tuner.TrialFits`): each a
    :class:`~seq2final.training.loop.FitRun` of a fresh model, or of its head on cached
    features where the grid trains it so, or under ``fuse`` a
    :class:`~seq2final.training.fused.FusedRun` of several."""

    make_model: Callable[[], nn.Module]
    task: Task
    engine: Engine
    max_epochs: int

    def _trained_as(self, params: dict[str, float]) -> tuple[nn.Module, Task, Engine]:
        """A fresh model and what its fit trains: the model, or its head on cached features
        where the grid's trial would train that way (:func:`fit_cached`)."""
        model = self.make_model()
        if cache_refusal(model, self.task, HyperParameters(params), self.engine) is None:
            return on_features(model, self.task, self.engine)
        return model, self.task, self.engine

    def start(self, params: dict[str, float], seed: int) -> FitRun:
        model, task, engine = self._trained_as(params)
        return FitRun(model, task, HyperParameters(params), engine, self.max_epochs, seed)

    def load(self, path: Path, params: dict[str, float]) -> FitRun:
        _, task, engine = self._trained_as(params)
        return FitRun.load(path, task, engine)

    def weights(self, run: FitRun) -> dict[str, torch.Tensor]:
        state = run.model.state_dict()
        if is_head(run.model):  # the whole model: its body as built, its head as trained
            state = {**self.make_model().state_dict(), **state}
        return {name: value.detach().cpu().clone() for name, value in state.items()}

    def start_stack(
        self, params: list[dict[str, float]], seeds: list[int], labels: list[int]
    ) -> FusedRun:
        trials = [
            FusedTrial(HyperParameters(p), seed) for p, seed in zip(params, seeds, strict=True)
        ]
        models = [self.make_model() for _ in trials]
        return FusedRun(models, self.task, trials, self.engine, self.max_epochs, labels)

    def load_stack(self, path: Path) -> FusedRun:
        return FusedRun.load(path, self.task, self.engine)


@dataclass
class Context:
    """Everything a mode needs to train.

    ``owner_key`` is the key of the historical state or job these fits belong to: it names their
    Optuna studies (``<owner_key>/<stage>``), so two jobs never share a study. ``seed_key`` is
    the key it would have under any budget: it seeds their initialisations and trials, so a
    resumed job draws what it drew before and one configuration trains the same under every
    budget (docs/methods.md, "Tuning"). ``warm_start``: the previous
    time's model that a pooled job of a stream starts from instead of a fresh one
    (``protocol_options.warm_start``). ``optimizer``: the recipe the mode declares
    (``optimizer=`` when it registers), whose hyper-parameters its spaces were checked against;
    a tuned fit whose task names another is refused before its first trial.
    """

    sequence: ShiftSequence
    arch: str
    seed: int
    engine: Engine
    budget: Budget
    budget_name: str
    tuner: Tuner
    owner_key: str
    seed_key: str
    device: torch.device
    fits: list[FitRecord] = field(default_factory=list)
    learning_curves: list[CurveRow] = field(default_factory=list)
    warm_start: nn.Module | None = None
    optimizer: str = "adam"
    # each finished trial's test accuracy recorded (TrialRecord.test_accuracy); off for a state
    # shared by sequences whose final steps differ (pretrain_historical.shared_history)
    record_test: bool = True
    # the fits made before this context that it continues, in order: its historical state's,
    # a growing chain's previous state's, a warm-started job's previous job's (known_winner)
    earlier: list[FitRecord] = field(default_factory=list)

    @classmethod
    def standalone(
        cls,
        sequence: ShiftSequence,
        root: Path,
        *,
        arch: str = "convnet_1",
        seed: int = 0,
        budget: Budget | None = None,
        engine: Engine | None = None,
        optimizer: str = "adam",
    ) -> Context:
        """A context outside any run, to try or test a mode on its own (docs/extending.md,
        "Testing a mode on its own"): its studies and checkpoints under ``root`` (a journal
        file), the grid at 3 epochs a trial on the CPU unless ``budget`` and ``engine`` say
        otherwise, keyed as one owner named ``standalone``."""
        budget = budget or Budget(sampler="grid", max_epochs=3)
        engine = engine or Engine(device="cpu")
        return cls(
            sequence=sequence, arch=arch, seed=seed, engine=engine, budget=budget,
            budget_name="standalone", tuner=Tuner(budget, None, Path(root), seed),
            owner_key="standalone", seed_key="standalone", device=engine.torch_device(),
            optimizer=optimizer,
        )  # fmt: skip

    @property
    def num_classes(self) -> int:
        return len(self.sequence.class_names)

    @property
    def final_index(self) -> int:
        return self.sequence.num_steps - 1

    def split(self, step: int | str, split: str) -> TensorSplit:
        """Split ``split`` (train, valid, test) of step ``step`` (``-1``: final, ``"oracle"``)."""
        return TensorSplit.from_arrays(*self.sequence.step(step).split(split))

    def history(self, split: str) -> TensorSplit:
        """Steps 0..T−1 combined."""
        return TensorSplit.concat([self.split(t, split) for t in range(self.final_index)])

    def seeded(self, stage: str, build: Callable[[], M]) -> M:
        """``build()`` under the stage's seed, on the device: the same initial weights for every
        trial of a stage and on every resumed run, as in the original."""
        torch.manual_seed(derived_seed(self.seed, self.seed_key, stage, "init"))
        return build().to(self.device)

    def new_model(self, stage: str) -> nn.Module:
        """A freshly initialised model of the context's architecture for ``stage``, or a copy of
        :attr:`warm_start` where the job continues the previous time's model."""
        if self.warm_start is not None:
            return clone_model(self.warm_start).to(self.device)
        return self.seeded(stage, lambda: build_model(self.arch, self.num_classes))

    def known_winner(self, stage: str) -> dict[str, float] | None:
        """The values that won this fit on the previous step, which a ``keep_known`` halving
        budget keeps at every rung (docs/methods.md, "Tuning"): the previous step of its chain
        among the fits before it (:func:`~seq2final.training.halving.previous_step`: in
        :attr:`earlier`, then this context's), else the same stage of the previous time's job (a
        warm-started stream's); ``None`` for a fit of no chain and no previous job."""
        before = [*self.earlier, *self.fits]
        index = previous_step(stage, [fit.stage for fit in before])
        if index is None:
            index = next((i for i in reversed(range(len(before))) if before[i].stage == stage),
                         None)  # fmt: skip
        return None if index is None else dict(before[index].params)

    def tuned_fit(
        self, stage: str, space: SearchSpace, make_model: Callable[[], M], task: Task
    ) -> M:
        """Tune one fit; return its selected model and keep its record in :attr:`fits`.

        A trial that trains the head alone on a body whose output cannot change (frozen, its
        BatchNorm statistics fixed, no augmentation or dropout) computes the body's features
        once and trains the head on them (:mod:`seq2final.training.features`: the same result on
        the CPU, to float tolerance under amp or on CUDA); such trials run one at a time, never
        stacked."""
        return self.tuned(stage, space, make_model, task)[0]

    def tuned(
        self, stage: str, space: SearchSpace, make_model: Callable[[], M], task: Task
    ) -> tuple[M, FitResult]:
        """:meth:`tuned_fit`, also returning the selected trial's fit (for what a mode computes
        from the fit itself, such as SI's path integral)."""
        named = task.optimizer_recipe.name
        if named != self.optimizer:
            raise Seq2FinalError(
                f"fit '{stage}': its task names optimizer '{named}' but its mode declares "
                f"'{self.optimizer}'; valid: the mode's optimizer= and the task's optimizer= alike"
            )
        progress = current()
        train_trial, train_stack = self._trainers(make_model, task, progress)
        width = fuse_width(self.engine, task)
        cached = setup_refusal(task, self.engine) is None  # a model is built to check only then
        if width > 1 and cached and cache_refusal(make_model(), task, None, self.engine) is None:
            width = 1  # a head on cached features costs less than a stack of whole networks
        # a context made without a sequence (a fit on given data) has no test split
        scored = self.record_test and self.sequence is not None
        with progress.fit(stage):
            tuned = self.tuner.tune(
                f"{self.owner_key}/{stage}", space, train_trial, train_stack, width,
                seed_name=f"{self.seed_key}/{stage}",
                fits=GridFits(make_model, task, self.engine, self.budget.max_epochs),
                known=self.known_winner(stage) if self.budget.keep_known else None,
                test_score=self._test_score(stage, make_model, task) if scored else None,
            )  # fmt: skip
        model = make_model()
        cost = fit_cost(
            model, task, HyperParameters(tuned.params), self.engine, self.budget.max_epochs
        )
        model.load_state_dict(tuned.state_dict)
        set_dropout(model, float(tuned.params.get("dropout", 0.0)))
        model.eval()
        self._record(stage, tuned, cost.of_trials(tuned.trials), progress.label)
        return model, tuned.fit

    def _trainers(
        self, make_model: Callable[[], M], task: Task, progress: Reporter
    ) -> tuple[TrainTrial, TrainStack]:
        """How a trial trains alone (to its end, with the fit cache where it applies) and how
        a stack of trials trains fused."""

        def train_trial(
            params: dict[str, float], seed: int, report: Callable[[int, float], None]
        ) -> tuple[FitResult, dict[str, torch.Tensor]]:
            model = make_model()
            hp = HyperParameters(params)  # checked and completed by the fit
            epochs = self.budget.max_epochs
            progress.epochs(epochs)
            result = fit_cached(model, task, hp, self.engine, epochs, seed, report, progress.epoch)
            return result, {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}

        def train_stack(runs: list[TrialRun]) -> None:
            trials = [
                FusedTrial(HyperParameters(run.params), run.seed, run.report,
                           functools.partial(_finish_on_cpu, run))
                for run in runs
            ]  # fmt: skip
            models = [make_model() for _ in runs]
            fit_fused(models, task, trials, self.engine, self.budget.max_epochs)

        return train_trial, train_stack

    def _test_score(
        self, stage: str, make_model: Callable[[], M], task: Task
    ) -> Callable[[dict[str, torch.Tensor]], float | None]:
        """A finished trial's model on the final step's test split, at the step the fit
        validates at: recorded with the trial for the search measurement, never selected on.
        Its own random state (building the model seeds and draws), so a fused stack's other
        members draw what they would without it; a failure costs the record, not the fit."""
        test: list[TensorSplit] = []

        def score(weights: dict[str, torch.Tensor]) -> float | None:
            devices = [self.device] if self.device.type == "cuda" else []
            try:
                with torch.random.fork_rng(devices=devices):
                    if not test:
                        test.append(self.split(self.final_index, "test"))
                    model = make_model()
                    model.load_state_dict(weights)
                    return accuracy(model, test[0], self.engine, task.valid_step)
            except Exception as error:  # noqa: BLE001 - a measurement, never the fit's result
                log.warning("%s: a trial's test accuracy not recorded (%s)", stage, error)
                return None

        return score

    def _record(self, stage: str, tuned: Tuned, flops: tuple[int, int], label: str) -> None:
        """The tuned fit's record (its FLOPs counting pruned trials' epochs too), its learning
        curve, and one log line."""
        train_flops, eval_flops = flops
        self.fits.append(
            FitRecord(
                stage=stage,
                params=tuned.params,
                valid_accuracy=tuned.fit.valid_accuracy,
                best_epoch=tuned.fit.best_epoch,
                epochs=tuned.fit.epochs,
                trials=tuned.finished_trials,
                train_flops=train_flops,
                eval_flops=eval_flops,
                trial_summaries=tuned.trials,
            )
        )
        self.learning_curves.extend(CurveRow(stage=stage, **row) for row in tuned.fit.history)
        log.info(
            "%s%s: valid %.3f (epoch %d of %d, %d trial(s)) with %s",
            f"{label} · " if label not in ("", stage) else "",
            stage,
            tuned.fit.valid_accuracy,
            tuned.fit.best_epoch,
            tuned.fit.epochs,
            tuned.finished_trials,
            ", ".join(f"{k}={v:.3g}" for k, v in tuned.params.items()),
        )

    def closed_form_fit(
        self, stage: str, model: nn.Module, valid: TensorSplit, forward_images: int
    ) -> float:
        """Record a fit made without the loop (a head set from class means, docs/representations.md):
        no epochs and no trials; its training FLOPs are ``forward_images`` forward passes of
        ``model`` (the passes that computed its features) and its validation pass is priced as a
        tuned fit's. Its validation accuracy, returned, is what
        :func:`~seq2final.methods.final.continue_chains` compares chains by; the record joins
        :attr:`fits`, so the job's compute counts it like any fit."""
        per_image = image_flops(model, valid, self.engine, None)
        valid_accuracy = accuracy(model, valid, self.engine)
        self.fits.append(
            FitRecord(
                stage=stage,
                params={},
                valid_accuracy=valid_accuracy,
                best_epoch=0,
                epochs=0,
                trials=0,
                train_flops=per_image * int(forward_images),
                eval_flops=per_image * len(valid),
            )
        )
        log.info("%s: valid %.3f (closed form, %d images)", stage, valid_accuracy, forward_images)
        return valid_accuracy


def _finish_on_cpu(run: TrialRun, result: FitResult, weights: dict[str, torch.Tensor]) -> None:
    """A fused model's stop, handed to its trial with its weights copied to the CPU (as a single
    fit's are)."""
    run.finish(result, {name: value.detach().cpu().clone() for name, value in weights.items()})
