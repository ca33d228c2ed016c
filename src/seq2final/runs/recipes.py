"""Recipes: the work a store carries out for a key it does not hold yet.

The pipelines return recipes (:class:`StateRecipe`, :class:`JobRecipe`) rather than trained
objects; the stores run a recipe only when its key is not stored yet (Kedro's lazy saving), so
finished work is reused and an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from seq2final.data.sequence import ShiftSequence
from seq2final.methods import (
    FINAL_MODES,
    HISTORICAL_MODES,
    METHODS,
    Context,
    FinalOutcome,
    HistoricalState,
    ModelChain,
)
from seq2final.methods.historical import train_step0
from seq2final.models import count_parameters
from seq2final.protocols import STEP_SPLITS
from seq2final.runs.plans import STEP0, JobPlan, RunPlan, StatePlan, ViewPlan
from seq2final.runs.result_store import ResultStore
from seq2final.runs.state_store import HistoricalStore
from seq2final.training.engine import Engine, predict_logits
from seq2final.training.flops import image_flops
from seq2final.training.metrics import classification_metrics
from seq2final.training.search import SearchSpace, get_budget
from seq2final.training.tensors import TensorSplit
from seq2final.training.tuner import Tuner

log = logging.getLogger(__name__)


def _test_metrics(
    model: nn.Module, test: TensorSplit, engine: Engine, step: int | None
) -> dict[str, float]:
    return classification_metrics(predict_logits(model, test, engine, step), test.y)


def chain_accuracies(
    outcome: FinalOutcome, test: TensorSplit, engine: Engine
) -> dict[str, dict[str, float]]:
    """Every candidate chain's final validation and test accuracy, each from its own model.

    The paper's SFT column is the best schedule on *test*; ours is chosen on validation. Listing
    both for every schedule lets a reader put the two side by side.
    """
    return {
        name: {
            "valid_accuracy": valid,
            "test_accuracy": _test_metrics(model, test, engine, outcome.step)["accuracy"],
        }
        for name, (model, valid) in outcome.candidates.items()
    }


def problem_sequence(sequence: ShiftSequence, view: ViewPlan | None) -> ShiftSequence:
    """What a state or job trains on: the sequence, or the protocol's view of it."""
    if view is None:
        return sequence
    return sequence.view(view.name, view.steps, view.mixed_seed)


def step_accuracies(
    model: nn.Module, sequence: ShiftSequence, engine: Engine, step: int | None
) -> dict[str, dict[str, float]]:
    """The model's accuracy on every step of the whole sequence, on each of
    :data:`~seq2final.protocols.STEP_SPLITS`, with each test split's size: what every protocol
    scores a view's model by (keys are step indices as strings, as JSON keeps them)."""
    table: dict[str, dict[str, float]] = {}
    for index in range(sequence.num_steps):
        row: dict[str, float] = {}
        for split in STEP_SPLITS:
            data = TensorSplit.from_arrays(*sequence.step(index).split(split))
            row[split] = _test_metrics(model, data, engine, step)["accuracy"]
            if split == "test":
                row["test_size"] = len(data)
        table[str(index)] = row
    return table


def _context(plan: RunPlan, sequence: ShiftSequence, owner_key: str) -> Context:
    engine = plan.engine_options()
    budget = get_budget({plan.budget_name: plan.budget}, plan.budget_name)
    root = Path(plan.tuning.get("root", "data/06_models/optuna"))
    return Context(
        sequence=sequence,
        arch=plan.arch,
        seed=plan.seed,
        engine=engine,
        budget=budget,
        budget_name=plan.budget_name,
        tuner=Tuner(budget, plan.tuning.get("storage"), root, plan.seed),
        owner_key=owner_key,
        device=engine.torch_device(),
    )


@dataclass
class StateRecipe:
    """Trains one historical state when its store does not have it yet."""

    plan: RunPlan
    state: StatePlan
    sequence: ShiftSequence
    _context: Context | None = None

    def build(self, store: Mapping[str, HistoricalState]) -> HistoricalState:
        started = time.perf_counter()
        sequence = problem_sequence(self.sequence, self.state.view)
        ctx = self._context = _context(self.plan, sequence, self.state.key)
        if self.state.mode == STEP0:
            model = train_step0(ctx, SearchSpace.parse(self.state.config["space"], "step0"))
            chains = {"main": ModelChain([model])}
        else:
            mode = HISTORICAL_MODES[self.state.mode]
            step0 = None
            if self.state.step0_key is not None:
                key = self.state.step0_key

                def step0() -> nn.Module:
                    return store[key].to(ctx.device).chains["main"].last

            assert mode.train is not None
            chains = mode.train(ctx, self.state.config, step0)
        return HistoricalState(
            self.state.mode,
            self.plan.arch,
            chains,
            ctx.fits,
            {
                "key": self.state.key,
                "sequence_key": self.plan.sequence_key,
                "seed": self.plan.seed,
                "budget": self.plan.budget_name,
                "step0": self.state.step0_key,
                "wall_seconds": time.perf_counter() - started,
                "device": str(ctx.device),
            },
        )

    def finished(self, store: HistoricalStore, computed: bool) -> None:
        if computed and self._context is not None:
            self._context.tuner.discard_checkpoints()


@dataclass
class JobOutcome:
    """A finished job: its result record, final model and learning curves."""

    record: dict[str, Any]
    model: nn.Module
    curves: list[dict[str, Any]]


def historical_costs(key: str | None, store: Mapping[str, HistoricalState]) -> dict[str, int]:
    """The training FLOPs of historical state ``key`` and of every state it continues (the step-0
    model a chain starts from), by key; empty for a job with no state.

    Each of these states is shared by the methods (and views) that continue it, so a total over
    several jobs charges each key once (``reporting.tables.train_flops_once``).
    """
    costs = {}
    while key is not None:
        state = store[key]
        costs[key] = sum(fit.get("train_flops", 0) for fit in state.fits)
        key = state.info.get("step0")
    return costs


@dataclass
class JobRecipe:
    """Runs one job's final mode on a loaded historical state and evaluates it on the test set.

    ``historical_costs`` are the training FLOPs of that state and of the states it continues, by
    key, which the job's record carries as shared.
    """

    plan: RunPlan
    job: JobPlan
    sequence: ShiftSequence
    state: HistoricalState | None
    historical_costs: Mapping[str, int]
    force: bool = False
    _context: Context | None = None

    @property
    def label(self) -> str:
        """The job in progress lines: its one name, and its view under a protocol."""
        view = f" (steps {self.job.view.name})" if self.job.view is not None else ""
        return self.job.name + view

    def run(self) -> JobOutcome:
        started = time.perf_counter()
        sequence = problem_sequence(self.sequence, self.job.view)
        ctx = self._context = _context(self.plan, sequence, self.job.key)
        state = None if self.state is None else self.state.to(ctx.device)
        outcome = FINAL_MODES[self.job.final].run(ctx, self.job.config, state)
        test = ctx.split(-1, "test")
        metrics = _test_metrics(outcome.model, test, ctx.engine, outcome.step)
        chains = chain_accuracies(outcome, test, ctx.engine)
        wall = time.perf_counter() - started
        valid_accuracy = outcome.valid_accuracy
        if valid_accuracy is None:
            valid_accuracy = ctx.fits[-1]["valid_accuracy"]
        method = METHODS.get(self.job.method)
        record = {
            "job_key": self.job.key,
            "sequence": self.plan.sequence_name,
            "sequence_key": self.plan.sequence_key,
            "dataset": self.plan.dataset,
            "arch": self.plan.arch,
            "method": self.job.method,
            "paper_name": method.paper_name if method else self.job.method,
            "paper_class": method.paper_class if method else None,
            "aliases": [n for n in self.job.requested if n != self.job.method],
            "historical": self.job.historical,
            "final": self.job.final,
            "historical_state": self.job.state_key,
            "seed": self.plan.seed,
            "budget": self.plan.budget_name,
            "test_accuracy": metrics["accuracy"],
            "worst_class_accuracy": metrics["worst_class_accuracy"],
            "test_nll": metrics["nll"],
            "ece": metrics["ece"],
            "valid_accuracy": valid_accuracy,
            "epochs": sum(f["epochs"] for f in ctx.fits),
            "trials": sum(f["trials"] for f in ctx.fits),
            "wall_seconds": wall,
            "device": str(ctx.device),
            "parameters": count_parameters(outcome.model, "paper"),
            "test_size": len(test),
            "hyperparameters": {f["stage"]: f["params"] for f in ctx.fits},
            "chosen": outcome.chosen,
            "chains": chains,
            "eval_step": outcome.step,
            "engine": self.plan.engine,
            "fits": [{k: v for k, v in f.items() if k != "history"} for f in ctx.fits],
            # compute: this job's own fits, every trial included; the historical state and the
            # step-0 model it continues are shared by the methods that continue them, so they are
            # charged to themselves, by key, and shown here
            "train_flops": sum(f["train_flops"] for f in ctx.fits),
            "eval_flops": sum(f["eval_flops"] for f in ctx.fits),
            "inference_flops_per_image": image_flops(outcome.model, test, ctx.engine, outcome.step),
            "historical_flops": {"shared": True, "states": dict(self.historical_costs)}
            if self.historical_costs
            else None,
        }
        if self.job.view is not None:  # scored by a temporal protocol: every step's accuracy
            record["view"] = {"name": self.job.view.name, "steps": list(self.job.view.steps),
                              "mixed_seed": self.job.view.mixed_seed}  # fmt: skip
            record["step_accuracies"] = step_accuracies(
                outcome.model, self.sequence, ctx.engine, outcome.step
            )
        curves = [{"stage": f["stage"], **row} for f in ctx.fits for row in f["history"]]
        return JobOutcome(record, outcome.model, curves)

    def failed(self, error: BaseException) -> None:
        """Nothing to undo: the study and its checkpoint stay, so a rerun resumes."""

    def finished(self, store: ResultStore, computed: bool) -> None:
        if computed and self._context is not None:
            self._context.tuner.discard_checkpoints()
