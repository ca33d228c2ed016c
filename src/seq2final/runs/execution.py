"""Training a run's historical states and final jobs, each key once, into its store.

The training nodes (``pretrain_historical.train_historical_states``,
``adapt_final.train_final_jobs``) call :func:`train_states` and :func:`train_jobs` (the latter on
the :class:`StartStates` loaded before it, ``adapt_final.load_start_states``), which train
only the keys their store does not hold yet and store each one as soon as it is trained: finished
work is reused and an interrupted run resumes where it stopped. A key is trained under its lease
(:mod:`seq2final.runs.leases`), so processes sharing a store train it once.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from torch import nn

from seq2final.core.errors import Seq2FinalError
from seq2final.core.files import json_safe
from seq2final.core.progress import Progress
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
from seq2final.methods.blocks import space_of
from seq2final.methods.historical import train_step0
from seq2final.models import count_parameters, network_of
from seq2final.protocols import STEP_SPLITS
from seq2final.runs.detection import Detections, shared_detection
from seq2final.runs.leases import claim
from seq2final.runs.planner import load_states
from seq2final.runs.plans import STEP0, JobPlan, RunPlan, StatePlan
from seq2final.runs.result_store import ResultStore
from seq2final.runs.state_store import HistoricalStore
from seq2final.training.engine import Engine, predict_logits
from seq2final.training.flops import image_flops
from seq2final.training.metrics import classification_metrics
from seq2final.training.records import (
    RECORD_FORMAT,
    CurveRow,
    FitRecord,
    ResultRecord,
    StateInfo,
    StepScore,
    StepView,
)
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


def problem_sequence(sequence: ShiftSequence, view: StepView | None) -> ShiftSequence:
    """What a state or job trains on: the sequence, or the protocol's view of it."""
    if view is None:
        return sequence
    return sequence.view(view.name, view.steps, view.mixed_seed)


def step_accuracies(
    model: nn.Module, sequence: ShiftSequence, engine: Engine, step: int | None
) -> dict[str, StepScore]:
    """The model's accuracy on every step of the whole sequence, on each of
    :data:`~seq2final.protocols.STEP_SPLITS`, with each test split's size: what every protocol
    scores a view's model by (keys are step indices as strings, as JSON keeps them)."""
    table: dict[str, StepScore] = {}
    for index in range(sequence.num_steps):
        row: dict[str, float] = {}
        for split in STEP_SPLITS:
            data = TensorSplit.from_arrays(*sequence.step(index).split(split))
            row[split] = _test_metrics(model, data, engine, step)["accuracy"]
            if split == "test":
                row["test_size"] = len(data)
        table[str(index)] = StepScore.model_validate(row)
    return table


def _context(
    plan: RunPlan, sequence: ShiftSequence, owner: StatePlan | JobPlan, optimizer: str = "adam"
) -> Context:
    if not owner.seed_key:
        raise Seq2FinalError(f"'{owner.key}' has no seed key: plan runs with plan_run")
    return Context(
        sequence=sequence,
        arch=plan.arch,
        seed=plan.seed,
        engine=plan.engine,
        budget=plan.budget,
        budget_name=plan.budget_name,
        tuner=Tuner(plan.budget, plan.tuning.storage, Path(plan.tuning.root), plan.seed),
        owner_key=owner.key,
        seed_key=owner.seed_key,
        record_test=not (plan.shared_history and isinstance(owner, StatePlan)),
        device=plan.engine.torch_device(),
        optimizer=optimizer,
    )


def train_state(
    plan: RunPlan, state: StatePlan, sequence: ShiftSequence, store: Mapping[str, HistoricalState]
) -> tuple[HistoricalState, Context]:
    """Trains one historical state (its step-0 model, if it continues one, read from ``store``);
    the context its fits ran in comes with it."""
    started = time.perf_counter()
    declared = "adam" if state.mode == STEP0 else HISTORICAL_MODES[state.mode].optimizer
    ctx = _context(plan, problem_sequence(sequence, state.view), state, declared)
    extends = None
    if state.mode == STEP0:
        model = train_step0(ctx, space_of(state.config, "space", state.config.where))
        chains = {"main": ModelChain([model])}
    elif state.extends is not None:  # a growing chain: the previous time's state, one step on
        grow, extends = HISTORICAL_MODES[state.mode].grow, store[state.extends].to(ctx.device)
        ctx.earlier = list(extends.fits)
        assert grow is not None and state.view is not None
        chains = {
            name: grow(ctx, state.config, name, chain, state.view.steps[-1])
            for name, chain in extends.chains.items()
        }
    else:
        mode = HISTORICAL_MODES[state.mode]
        step0 = None
        if state.step0_key is not None:
            key = state.step0_key

            def step0() -> nn.Module:
                return store[key].to(ctx.device).chains["main"].last

        assert mode.train is not None
        chains = mode.train(ctx, state.config, step0)
    trained = HistoricalState(
        state.mode,
        plan.arch,
        chains,
        ctx.fits,
        StateInfo(
            key=state.key,
            sequence_key=plan.sequence_key,
            seed=plan.seed,
            budget=plan.budget_name,
            step0=state.step0_key,
            extends=state.extends,
            wall_seconds=time.perf_counter() - started,
            device=str(ctx.device),
        ),
        extends,
    )
    return trained, ctx


@dataclass
class JobOutcome:
    """A finished job: its result record, final model and learning curves."""

    record: ResultRecord
    model: nn.Module
    curves: list[CurveRow]


def historical_costs(key: str | None, summary: Callable[[str], HistoricalState]) -> dict[str, int]:
    """The training FLOPs of historical state ``key`` and of every state it continues (the
    previous times' states of a growing chain, the step-0 model a chain starts from), by key;
    empty for a job with no state. ``summary`` gives a state's fits and info by key (the store's
    :meth:`~seq2final.runs.state_store.HistoricalStore.summary` reads them without the models).

    Each of these states is shared by the methods (and views) that continue it, so a total over
    several jobs charges each key once (``reporting.tables.train_flops_once``).
    """
    costs = {}
    while key is not None:
        state = summary(key)
        costs[key] = sum(fit.train_flops or 0 for fit in state.fits)
        key = state.info.continues if state.info is not None else None
    return costs


@dataclass(frozen=True)
class StartStates:
    """The historical states a plan's jobs start from, every one loaded and checked before any
    final fit, with each one's :func:`historical_costs`: the dataset ``start_states`` that
    ``adapt_final`` and ``representations`` train from."""

    states: dict[str, HistoricalState]
    costs: dict[str, dict[str, int]]


def start_states(plan: RunPlan, store: HistoricalStore) -> StartStates:
    """The states ``plan``'s jobs need, loaded from ``store`` (one line naming the command that
    makes a missing one, :func:`~seq2final.runs.planner.load_states`), and their costs, read once
    per state from the stored fits of it and of what it continues (no models read)."""
    loaded = load_states(plan, store)
    return StartStates(loaded, {key: historical_costs(key, store.summary) for key in loaded})


def fit_job(
    plan: RunPlan,
    job: JobPlan,
    sequence: ShiftSequence,
    state: HistoricalState | None,
    costs: Mapping[str, int],
    warm_start: nn.Module | None = None,
    detections: Detections | None = None,
    previous: Sequence[FitRecord] = (),
) -> tuple[JobOutcome, Context]:
    """Runs one job's final mode on its historical state and evaluates it on the test set; the
    context its fits ran in comes with it.

    ``costs`` are the training FLOPs of that state and of the states it continues, by key
    (:func:`historical_costs`), which the job's record carries as shared. ``warm_start``: the
    previous time's model a warm-started pooled job starts from (``job.warm_start``'s).
    ``detections``: shared by a run's jobs, so that each historical model (the ERM one of FT,
    LP-FT, ST-1, ...) is scored once per sequence view (:func:`shared_detection`).
    ``previous``: the fits of that previous time's job (:meth:`Context.known_winner`).
    """
    started = time.perf_counter()
    problem = problem_sequence(sequence, job.view)
    ctx = _context(plan, problem, job, FINAL_MODES[job.final].optimizer)
    if warm_start is not None:
        ctx.warm_start = warm_start.to(ctx.device)
    state = None if state is None else state.to(ctx.device)
    ctx.earlier = [*(state.fits if state is not None else []), *previous]
    outcome = FINAL_MODES[job.final].run(ctx, job.config, state)
    test = ctx.split(-1, "test")
    metrics = _test_metrics(outcome.model, test, ctx.engine, outcome.step)
    chains = chain_accuracies(outcome, test, ctx.engine)
    wall = time.perf_counter() - started
    fields = _record_fields(plan, job, ctx, outcome, test, metrics, chains, wall)
    fields["historical_flops"] = {"shared": True, "states": dict(costs)} if costs else None
    fields["detection_auroc"] = shared_detection(
        state, job.state_key, outcome.chosen, problem, ctx.engine, detections
    )
    if job.view is not None:  # scored by a temporal protocol: every step's accuracy
        fields["view"] = job.view.model_dump()
        fields["step_accuracies"] = step_accuracies(
            outcome.model, sequence, ctx.engine, outcome.step
        )
    record = ResultRecord.model_validate(json_safe(fields))  # the engine and fits as they are
    return JobOutcome(record, outcome.model, ctx.learning_curves), ctx


def _record_fields(
    plan: RunPlan, job: JobPlan, ctx: Context, outcome: FinalOutcome, test: TensorSplit,
    metrics: Mapping[str, float], chains: Any, wall: float,
) -> dict[str, Any]:  # fmt: skip
    """A job's result record as fields: what ran, what it scored on the final test set, what
    it trained and chose, and its compute (its own fits, every trial included; the historical
    state and step-0 model it continues are shared by the methods that continue them, so they
    are charged to themselves and added by the caller)."""
    valid_accuracy = outcome.valid_accuracy
    if valid_accuracy is None:
        valid_accuracy = ctx.fits[-1].valid_accuracy
    method = METHODS.get(job.method)
    return {
        "format": RECORD_FORMAT,
        "job_key": job.key,
        "sequence": plan.sequence_name,
        "sequence_key": plan.sequence_key,
        "dataset": plan.dataset,
        "arch": plan.arch,
        "method": job.method,
        "paper_name": method.paper_name if method else job.method,
        "paper_class": method.paper_class if method else None,
        "aliases": job.record_aliases,
        "historical": job.historical,
        "final": job.final,
        "historical_state": job.state_key,
        "seed": plan.seed,
        "budget": plan.budget_name,
        "test_accuracy": metrics["accuracy"],
        "worst_class_accuracy": metrics["worst_class_accuracy"],
        "test_nll": metrics["nll"],
        "ece": metrics["ece"],
        "valid_accuracy": valid_accuracy,
        "epochs": sum(f.epochs for f in ctx.fits),
        "trials": sum(f.trials for f in ctx.fits),
        "wall_seconds": wall,
        "device": str(ctx.device),
        "parameters": count_parameters(outcome.model, "paper"),
        "test_size": len(test),
        "hyperparameters": {f.stage: f.params for f in ctx.fits},
        "chosen": outcome.chosen,
        "chains": chains,
        "eval_step": outcome.step,
        "engine": plan.engine,
        "fits": ctx.fits,
        "train_flops": sum(f.train_flops or 0 for f in ctx.fits),
        "eval_flops": sum(f.eval_flops or 0 for f in ctx.fits),
        "inference_flops_per_image": image_flops(outcome.model, test, ctx.engine, outcome.step),
    }


class Tracker(Protocol):
    """What :func:`train_jobs` tells about each job as it goes (MLflow's
    :class:`~seq2final.tracking.jobs.JobTracker` is one)."""

    def start(self, job: JobPlan) -> str:
        """A job is about to train: the id of its run."""
        ...

    def fail(self, run_id: str, error: BaseException) -> None:
        """The job's training raised ``error``."""
        ...

    def complete(self, job: JobPlan, run_id: str | None, store: ResultStore) -> None:
        """The job is in ``store``: trained now under ``run_id``, or earlier (``None``)."""
        ...


def each_missing(
    kind: str,
    root: Path,
    items: Sequence[tuple[str, str]],
    stored: Callable[[str], bool],
    train: Callable[[str], str],
    finished: Callable[[str, bool], None],
    force: bool = False,
) -> None:
    """Trains each ``(key, label)`` of ``items`` that is not ``stored`` (or every one under
    ``force``) with ``train(key)``, which stores it and returns its note for the progress line;
    then ``finished(key, trained)`` for every key, trained now or reused. The key's lease is held
    while it trains (not while it finishes): a process asking for it meanwhile waits, then
    reuses it."""
    with Progress(kind, [label for _, label in items]) as progress:
        for key, label in items:
            trained = False
            if not (stored(key) and not force):
                with claim(root, key, done=functools.partial(stored, key)) as claimed:
                    if claimed and not (stored(key) and not force):
                        with progress.item(label) as shown:
                            shown.note = train(key)
                        trained = True
            if not trained:
                progress.reused()
            finished(key, trained)


def train_states(plan: RunPlan, sequence: ShiftSequence, store: HistoricalStore) -> None:
    """Trains the plan's historical states that ``store`` lacks, step-0 models before the chains
    that start from them, storing each as soon as it is trained.

    A state shared by several methods (the ERM model of FT, LP-FT, ST-1 and ST-B; the step-0
    model of SFT, EWC and SST) is trained once.
    """
    states = {state.key: state for state in plan.states}

    def train(key: str) -> str:
        trained, ctx = train_state(plan, states[key], sequence, store)
        store.put(key, trained)
        ctx.tuner.discard_checkpoints()
        return key

    def finished(key: str, trained: bool) -> None:
        if not trained:
            log.info("historical state %s exists; reusing it", key)

    each_missing(
        "historical state",
        store.root,
        [(state.key, state.name) for state in plan.states],
        store.__contains__,
        train,
        finished,
    )


def train_jobs(
    plan: RunPlan,
    sequence: ShiftSequence,
    states: Mapping[str, HistoricalState],
    costs: Mapping[str, Mapping[str, int]],
    store: ResultStore,
    tracker: Tracker | None = None,
) -> None:
    """Fits the plan's jobs that ``store`` lacks (every one under ``plan.force``) on their loaded
    historical ``states``, storing each as soon as it is fitted; ``costs``: each state's
    :func:`historical_costs`, by state key.

    With a ``tracker``, a job trained now is an MLflow run, RUNNING while it trains and FAILED if
    it raises; a job reused is logged from its record if it has no finished run yet.
    """
    jobs = {job.key: job for job in plan.jobs}
    runs: dict[str, str | None] = {}
    detections: Detections = {}

    def train(key: str) -> str:
        job = jobs[key]
        run_id = runs[key] = None if tracker is None else tracker.start(job)
        try:
            start = previous = None
            if job.warm_start is not None:
                # the network goes on (an output transform is fitted anew on each time's data)
                start = network_of(store.model(job.warm_start))
                previous = store[job.warm_start].fits
            outcome, ctx = fit_job(plan, job, sequence, states.get(job.state_key or ""),
                                   costs.get(job.state_key or "", {}), start,
                                   detections, previous or ())  # fmt: skip
            store.put(key, outcome.record, outcome.model, outcome.curves)
        except BaseException as error:  # the study and its checkpoint stay, so a rerun resumes
            if tracker is not None and run_id is not None:
                tracker.fail(run_id, error)
            raise
        ctx.tuner.discard_checkpoints()
        record = outcome.record
        return f"test {record.test_accuracy:.3f}, valid {record.valid_accuracy:.3f}; {key}"

    def finished(key: str, trained: bool) -> None:
        if not trained:
            log.info("job %s finished earlier; reusing it (force:true recomputes)", key)
        if tracker is not None:  # logged from the store, after the lease is given back
            tracker.complete(jobs[key], runs.get(key) if trained else None, store)

    each_missing(
        "job",
        store.results,
        [(job.key, job.label) for job in plan.jobs],
        store.__contains__,
        train,
        finished,
        force=plan.force,
    )
