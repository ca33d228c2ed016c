"""Training the data-efficiency curves of a run's historical states into their store
(docs/representations.md), one point (state, chain, kind, size) per key: finished points are
reused and an interrupted run resumes where it stopped, as states and jobs do
(:func:`seq2final.runs.execution.each_missing`).

Every state the run's jobs continue gets a curve per chain and kind, on its view's final step
(the whole sequence's, or a temporal protocol view's), all on the same nested subsets of that
step's training set, so the curves of two states differ by the states alone. With
``test_on: sequence`` every view's states are tested on the whole sequence's final step instead:
under ``test_then_train`` the states that saw steps 0..t−1, for every t, on one step, which is
how P_rep is followed over the number of steps a history holds. ``scratch`` adds the curve of a
freshly initialised model: what the final step's images buy without history.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass

import pandas as pd
import torch
from torch import nn

from seq2final.config.parameters import CurveOptions
from seq2final.core.seeds import derived_seed
from seq2final.data.sequence import ShiftSequence
from seq2final.methods import HistoricalState
from seq2final.models import BlockModel, build_model
from seq2final.representations.fit import (
    CURVE_SEMANTICS,
    SCRATCH,
    check_sizes,
    curve_point,
    doubling_sizes,
    nested_order,
    subset,
)
from seq2final.runs.execution import each_missing, problem_sequence
from seq2final.runs.frame_store import FrameStore
from seq2final.runs.keys import TRAINING_SEMANTICS, digest
from seq2final.runs.planner import load_states
from seq2final.runs.plans import RunPlan
from seq2final.training.records import StepView
from seq2final.training.tensors import TensorSplit

log = logging.getLogger(__name__)


def _same(model: nn.Module) -> nn.Module:
    """A chain's last model, handed back when its curve is drawn (a source's ``make``)."""
    return model


@dataclass(frozen=True)
class CurveSource:
    """A model whose curve is drawn: a historical state's chain, or the fresh reference.
    ``view``: the view whose final step it is tested on (``""``: the whole sequence's);
    ``history``: how many steps the state trained on (0 for the fresh model)."""

    label: str
    state_key: str | None
    chain: str
    view: str
    history: int
    methods: str
    make: Callable[[], nn.Module]


def _final_splits(sequence: ShiftSequence) -> tuple[TensorSplit, TensorSplit, TensorSplit]:
    final = sequence.step(-1)
    train, valid, test = (
        TensorSplit.from_arrays(*final.split(n)) for n in ("train", "valid", "test")
    )
    return train, valid, test


def curve_sizes(options: CurveOptions, available: int) -> list[int]:
    """The sizes a curve is drawn at: the options' own, or doubling from ``first_size`` up to
    the final step's training set; one line for a size it does not hold."""
    if options.sizes is not None:
        return check_sizes(options.sizes, available)
    return doubling_sizes(available, options.first_size)


def _sources(
    plan: RunPlan,
    states: Mapping[str, HistoricalState],
    options: CurveOptions,
    sequence: ShiftSequence,
) -> dict[str, tuple[StepView | None, list[CurveSource]]]:
    """Each tested view's (``""``: the whole sequence) step view and curve sources, in the
    plan's order; a view without a state to draw (Eval-Stream's time 0) has none."""
    by_view: dict[str, list[CurveSource]] = {}
    views: dict[str, StepView | None] = {}
    seen: set[tuple[str, str, str]] = set()
    for job in plan.jobs:
        view = "" if job.view is None or options.test_on == "sequence" else job.view.name
        views.setdefault(view, job.view if view else None)
        sources = by_view.setdefault(view, [])
        if job.state_key is None:
            continue
        state = states[job.state_key]
        history = len(job.view.steps) - 1 if job.view is not None else sequence.num_steps - 1
        for chain_name, chain in state.chains.items():
            if (job.state_key, chain_name, view) in seen:
                continue
            seen.add((job.state_key, chain_name, view))
            if not isinstance(chain.last, BlockModel):  # a joint model has no plain head to probe
                log.info("no curve for %s's chain %s: a joint model", state.mode, chain_name)
                continue
            label = state.mode if len(state.chains) == 1 else f"{state.mode}/{chain_name}"
            users = ", ".join(j.name for j in plan.jobs if j.state_key == job.state_key)
            sources.append(CurveSource(label, job.state_key, chain_name, view, history, users,
                                       functools.partial(_same, chain.last)))  # fmt: skip
    by_view = {view: sources for view, sources in by_view.items() if sources}  # states drawn
    if options.scratch:
        classes = len(sequence.class_names)
        for view, sources in by_view.items():
            sources.insert(0, CurveSource(SCRATCH, None, "", view, 0, "",
                                          lambda: build_model(plan.arch, classes)))  # fmt: skip
    return {view: (views[view], sources) for view, sources in by_view.items()}


def curve_key(
    plan: RunPlan, data: str, source: CurveSource, kind: str, size: int, options: CurveOptions
) -> str:
    """A point's key: readable parts, and a hash of everything that changes its result: the
    state (whose key hashes its own data, settings and code version) or, for the fresh model,
    the sequence's data, architecture and seed; the fit's engine options that change what it
    computes (not the device, as for states and jobs); the view it is tested on, the chain, kind,
    size and settings; and the versions of the training code and of the curves' own protocol."""
    engine = {k: v for k, v in plan.engine.results_key().items() if k != "patience"}
    settings = {
        "state": source.state_key or {"sequence": plan.sequence_key, "data": data,
                                      "arch": plan.arch, "seed": plan.seed},
        "chain": source.chain, "view": source.view, "kind": kind, "size": size,
        "max_epochs": options.max_epochs, "patience": options.patience, "engine": engine,
        "seed": plan.seed, "semantics": TRAINING_SEMANTICS, "curves": CURVE_SEMANTICS,
    }  # fmt: skip
    owner = source.state_key or f"{SCRATCH}-{plan.arch}-{plan.budget_name}"
    chain = f".{source.chain}" if source.chain and source.chain != "main" else ""
    return f"{owner}{chain}.{kind}.{size}.{digest(settings)}"


def train_curves(
    plan: RunPlan,
    sequence: ShiftSequence,
    states: Mapping[str, HistoricalState],
    store: FrameStore,
    options: CurveOptions,
) -> None:
    """Fit every point the store lacks, storing each as soon as it is made. Every state the
    plan needs must be given and every size must fit the final step's training set, checked
    before any fit; that no view trained on the sequence's final step when curves are tested on
    it is checked before the run starts (``config.checks.check_curve_views``)."""
    needed = load_states(plan, states)
    views = _sources(plan, needed, options, sequence)
    work: list[tuple[str, str]] = []
    makers: dict[str, Callable[[], pd.DataFrame]] = {}
    for view_name, (view, sources) in views.items():
        problem = problem_sequence(sequence, view)
        train, valid, test = _final_splits(problem)
        sizes = curve_sizes(options, len(train))
        order = nested_order(train.y.numpy(), derived_seed(plan.seed, "curves", view_name))
        for source in sources:
            for kind in options.kinds:
                if source.label == SCRATCH and kind == "lp":
                    continue  # a probe of random features says nothing of history
                for size in sizes:
                    key = curve_key(plan, sequence.content_hash, source, kind, size, options)
                    label = f"{source.label} {kind} n={size}" + (
                        f" ({view_name})" if view_name else ""
                    )
                    work.append((key, label))
                    makers[key] = _maker(plan, source, kind, size, options,
                                         (subset(train, order, size), valid, test), key)  # fmt: skip

    def fit_point(key: str) -> str:
        row = makers[key]()
        store.put(key, row)
        return f"test {row['test_accuracy'].iloc[0]:.3f}"

    each_missing("curve point", store.root, work, store.__contains__, fit_point,
                 lambda key, trained: None, plan.force)  # fmt: skip


def _maker(
    plan: RunPlan,
    source: CurveSource,
    kind: str,
    size: int,
    options: CurveOptions,
    splits: tuple[TensorSplit, TensorSplit, TensorSplit],
    key: str,
) -> Callable[[], pd.DataFrame]:
    def make() -> pd.DataFrame:
        if source.state_key is None:  # the reference's initial weights: one draw for every size
            torch.manual_seed(derived_seed(plan.seed, "curves", SCRATCH))
        point = curve_point(source.make(), kind, *splits, plan.engine,
                            options.max_epochs, derived_seed(plan.seed, key), options.patience)  # fmt: skip
        return pd.DataFrame([{
            "sequence": plan.sequence_name, "dataset": plan.dataset,
            "sequence_key": plan.sequence_key, "view": source.view, "arch": plan.arch,
            "seed": plan.seed, "budget": plan.budget_name, "state": source.label,
            "history": source.history, "state_key": source.state_key or "",
            "chain": source.chain, "methods": source.methods,
            **asdict(point),
        }])  # fmt: skip

    return make
