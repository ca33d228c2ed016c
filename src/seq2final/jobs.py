"""Jobs: what a run trains, the keys that name it, and the recipes the stores carry out.

A *job* is one (sequence, architecture, seed, historical mode, final mode, budget). Its historical
state is keyed by everything that determines it, and *not* by the final mode, so FT, LP-FT, ST-1
and ST-B share one ERM model and every sequential mode shares one step-0 model. Keys hash the full
configuration (search spaces, budget, engine options), so a change anywhere never reuses a stale
model, and a readable prefix says what the file is.

The pipelines return *recipes* (:class:`StateRecipe`, :class:`JobRecipe`) rather than trained
objects; the stores in :mod:`seq2final.datasets` run a recipe only when its key is not stored yet
(Kedro's lazy saving), so finished work is reused and an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch import nn

from seq2final.errors import MissingPrerequisiteError, Seq2FinalError
from seq2final.methods import (
    FINAL_MODES,
    HISTORICAL_MODES,
    METHODS,
    Chain,
    Context,
    FinalOutcome,
    HistoricalState,
    canonical_modes,
    check_schedules,
    family_of,
    method_label,
    resolve_request,
    train_step0,
)
from seq2final.metrics import classification_metrics
from seq2final.models import count_parameters
from seq2final.sequences import SequenceSpec, ShiftSequence
from seq2final.training import Data, Engine, HyperParameters, predict_logits
from seq2final.tuning import SearchSpace, Tuner, get_budget

if TYPE_CHECKING:
    from seq2final.datasets import HistoricalStore, ResultStore
    from seq2final.tracking import JobTracker

log = logging.getLogger(__name__)

STEP0 = "step0"


def _digest(payload: Any) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[
        :10
    ]


@dataclass(frozen=True)
class StatePlan:
    """One historical state to train (or reuse): a mode, or the shared step-0 model."""

    key: str
    mode: str
    config: dict[str, Any]
    step0_key: str | None = None


@dataclass(frozen=True)
class JobPlan:
    """One job: the modes actually trained and the names users asked for that map to it."""

    key: str
    method: str
    requested: tuple[str, ...]
    historical: str
    final: str
    state_key: str | None
    config: dict[str, Any]


@dataclass(frozen=True)
class RunPlan:
    """Everything one ``kedro run`` trains, resolved and validated before any work."""

    sequence_key: str
    sequence_name: str
    dataset: str
    data_path: str | None
    arch: str
    seed: int
    budget_name: str
    budget: dict[str, Any]
    engine: dict[str, Any]
    tuning: dict[str, Any]
    force: bool
    states: list[StatePlan]
    jobs: list[JobPlan]
    requested: list[tuple[str, str]] = field(default_factory=list)

    def engine_options(self) -> Engine:
        return Engine(**self.engine)

    def command(self, pipeline: str, job: JobPlan) -> str:
        """The command that runs ``pipeline`` for ``job`` with this plan's sequence and settings."""
        name = job.requested[0]
        what = (
            f"method:{name}"
            if name in METHODS
            else f"historical:{job.historical},final:{job.final}"
        )
        params = [f"sequence:{self.sequence_name}", f"seed:{self.seed}", f"dataset:{self.dataset}"]
        params += [f"data_path:{self.data_path}"] if self.data_path else []
        params += [what, f"arch:{self.arch}", f"budget:{self.budget_name}"]
        return f"kedro run --pipeline {pipeline} --params {','.join(params)}"


def plan_run(
    spec: SequenceSpec,
    request: Mapping[str, Any],
    budgets: Mapping[str, Any],
    training: Mapping[str, Any],
    tuning: Mapping[str, Any],
    historical_modes: Mapping[str, Any],
    final_modes: Mapping[str, Any],
    step0_space: Mapping[str, Any],
) -> RunPlan:
    """Resolve the run parameters into keyed states and jobs (no training, no data loading)."""
    budget_name = request["budget"]
    budget = get_budget(budgets, budget_name).model_dump()
    engine = Engine(**training)
    arch = request["arch"]
    check_mode_configs(historical_modes, final_modes, step0_space, spec.num_targets, budget_name)
    base = {
        "sequence": spec.key,
        "arch": arch,
        "seed": spec.seed,
        "budget": budget,
        "engine": engine.results_key(),
    }
    step0_key = f"{STEP0}-{arch}-{budget_name}-{_digest({**base, 'space': dict(step0_space)})}"
    states: dict[str, StatePlan] = {}
    jobs: dict[str, JobPlan] = {}
    requested = []
    for name, historical, final in resolve_request(
        request["method"], request["historical"], request["final"]
    ):
        historical, final = canonical_modes(historical, final, family_of(arch))
        state_key = None
        if historical != "none":
            mode = HISTORICAL_MODES[historical]
            config = dict(historical_modes[historical])
            depends = step0_key if mode.uses_step0 else None
            if depends and depends not in states:
                states[depends] = StatePlan(depends, STEP0, {"space": dict(step0_space)})
            state_key = f"{historical}-{arch}-{budget_name}-{_digest({**base, 'mode': historical, 'config': config, 'step0': depends})}"
            states.setdefault(state_key, StatePlan(state_key, historical, config, depends))
        final_config = dict(final_modes[final])
        slug = spec.key.split("-seed")[0]
        job_key = (
            f"{slug}.{arch}.{historical}+{final}.{budget_name}."
            f"{_digest({**base, 'state': state_key, 'final': final, 'config': final_config})}"
        )
        if job_key in jobs:
            job = jobs[job_key]
            jobs[job_key] = JobPlan(**{**asdict(job), "requested": (*job.requested, name)})
        else:
            jobs[job_key] = JobPlan(
                job_key,
                method_label(historical, final),
                (name,),
                historical,
                final,
                state_key,
                final_config,
            )
        requested.append((name, job_key))
    return RunPlan(
        sequence_key=spec.key,
        sequence_name=spec.name,
        dataset=spec.dataset,
        data_path=spec.data_path,
        arch=arch,
        seed=spec.seed,
        budget_name=budget_name,
        budget=budget,
        engine=asdict(engine),
        tuning=dict(tuning),
        force=bool(request.get("force", False)),
        states=list(states.values()),
        jobs=list(jobs.values()),
        requested=requested,
    )


def check_mode_configs(
    historical_modes: Mapping[str, Any],
    final_modes: Mapping[str, Any],
    step0_space: Mapping[str, Any],
    final_step: int | None = None,
    budget: str | None = None,
) -> None:
    """Every registered mode has its YAML block, and everything in it is usable.

    Checked here, before any training, so a typo in a YAML block costs seconds, not the hours of
    training that would run before the mode reading it is reached.
    """
    check_space(step0_space, "pretrain_historical.step0")
    for registry, blocks, where in (
        (HISTORICAL_MODES, historical_modes, "historical_modes"),
        (FINAL_MODES, final_modes, "final_modes"),
    ):
        unknown = [name for name in blocks if name not in registry]
        if unknown:
            raise Seq2FinalError(
                f"{where} has a block for unknown mode(s) {', '.join(unknown)}; "
                f"valid: {', '.join(registry)}"
            )
        for name, mode in registry.items():
            if not mode.config_keys:
                continue
            block = blocks.get(name)
            if block is None:
                raise Seq2FinalError(
                    f"{where} has no block for registered mode '{name}'; "
                    "add one to conf/base/parameters_*.yml"
                )
            for key in mode.config_keys:
                if key not in block:
                    raise Seq2FinalError(f"{where}.{name} needs '{key}'; it has {', '.join(block)}")
                check_space(block[key], f"{where}.{name}.{key}")
            weight = block.get("final_weight", 1.0)
            if not isinstance(weight, int | float) or weight <= 0:
                raise Seq2FinalError(
                    f"{where}.{name}.final_weight must be a positive number, got {weight!r}"
                )
            if final_step is not None and budget is not None:
                check_schedules(block, final_step, budget, f"{where}.{name}")


def check_space(raw: Mapping[str, Any], where: str) -> SearchSpace:
    """A search space that parses, names only known hyper-parameters and sets a learning rate."""
    space = SearchSpace.parse(raw, where)
    known = set(HyperParameters.__dataclass_fields__)
    unknown = [name for name in space.params if name not in known]
    if unknown:
        raise Seq2FinalError(
            f"search space {where} names unknown hyper-parameter(s) {', '.join(unknown)}; "
            f"valid: {', '.join(sorted(known))}"
        )
    if "lr" not in space.params:
        raise Seq2FinalError(f"search space {where} needs 'lr'")
    return space


def _test_metrics(
    model: nn.Module, test: Data, engine: Engine, step: int | None
) -> dict[str, float]:
    return classification_metrics(predict_logits(model, test, engine, step), test.y)


def chain_accuracies(
    outcome: FinalOutcome, test: Data, engine: Engine
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


def _context(plan: RunPlan, sequence: ShiftSequence, prefix: str) -> Context:
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
        prefix=prefix,
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
        ctx = self._context = _context(self.plan, self.sequence, self.state.key)
        if self.state.mode == STEP0:
            model = train_step0(ctx, SearchSpace.parse(self.state.config["space"], "step0"))
            chains = {"main": Chain([model])}
        else:
            mode = HISTORICAL_MODES[self.state.mode]
            step0 = None
            if self.state.step0_key is not None:
                key = self.state.step0_key

                def step0() -> nn.Module:
                    return store[key].to(ctx.device).chains["main"].last

            assert mode.train is not None
            chains = mode.train(ctx, self.state.config, step0)
        log.info(
            "historical state %s trained in %.1f s", self.state.key, time.perf_counter() - started
        )
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


@dataclass
class JobRecipe:
    """Runs one job's final mode on a loaded historical state and evaluates it on the test set."""

    plan: RunPlan
    job: JobPlan
    sequence: ShiftSequence
    state: HistoricalState | None
    force: bool = False
    _context: Context | None = None

    def run(self) -> JobOutcome:
        started = time.perf_counter()
        ctx = self._context = _context(self.plan, self.sequence, self.job.key)
        state = None if self.state is None else self.state.to(ctx.device)
        outcome = FINAL_MODES[self.job.final].run(ctx, self.job.config, state)
        test = ctx.split(-1, "test")
        metrics = _test_metrics(outcome.model, test, ctx.engine, outcome.step)
        chains = chain_accuracies(outcome, test, ctx.engine)
        wall = time.perf_counter() - started
        valid_accuracy = outcome.valid_accuracy
        if valid_accuracy is None:
            valid_accuracy = ctx.fits[-1]["valid_accuracy"]
        recipe = METHODS.get(self.job.method)
        record = {
            "job_key": self.job.key,
            "sequence": self.plan.sequence_name,
            "sequence_key": self.plan.sequence_key,
            "dataset": self.plan.dataset,
            "arch": self.plan.arch,
            "method": self.job.method,
            "paper_name": recipe.paper_name if recipe else self.job.method,
            "paper_class": recipe.paper_class if recipe else None,
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
        }
        curves = [{"stage": f["stage"], **row} for f in ctx.fits for row in f["history"]]
        return JobOutcome(record, outcome.model, curves)

    def failed(self, error: BaseException) -> None:
        """Nothing to undo: the study and its checkpoint stay, so a rerun resumes."""

    def finished(self, store: ResultStore, computed: bool) -> None:
        if computed and self._context is not None:
            self._context.tuner.discard_checkpoints()


@dataclass
class TrackedJob:
    """A job recipe whose run is tracked in MLflow: RUNNING while it trains, FAILED if it raises."""

    recipe: JobRecipe
    tracker: JobTracker
    _run_id: str | None = None

    @property
    def force(self) -> bool:
        return self.recipe.force

    def run(self) -> JobOutcome:
        self._run_id = self.tracker.start(self.recipe.job)
        return self.recipe.run()

    def failed(self, error: BaseException) -> None:
        if self._run_id is not None:
            self.tracker.fail(self._run_id, error)

    def finished(self, store: ResultStore, computed: bool) -> None:
        self.recipe.finished(store, computed)
        self.tracker.complete(self.recipe.job, self._run_id if computed else None, store)


def load_states(plan: RunPlan, store: Mapping[str, HistoricalState]) -> dict[str, HistoricalState]:
    """Every state the plan's jobs need, checked before any training starts."""
    states = {}
    for job in plan.jobs:
        if job.state_key is None or job.state_key in states:
            continue
        if job.state_key not in store:
            raise MissingPrerequisiteError(
                f"historical state '{job.state_key}' ({job.historical} for {job.method}) has not "
                f"been trained; make it with: {plan.command('pretrain_historical', job)}"
            )
        state = store[job.state_key]
        if state.arch != plan.arch or state.mode != job.historical:
            raise Seq2FinalError(
                f"historical state '{job.state_key}' holds a {state.mode} state for {state.arch}, "
                f"not {job.historical} for {plan.arch}; delete it and rerun pretrain_historical"
            )
        states[job.state_key] = state
    return states
