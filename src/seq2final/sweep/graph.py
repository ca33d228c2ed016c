"""A sweep's work as a graph: sequences, then historical states, then jobs, then ``evaluate``.

The graph is resolved from the run parameters and the stores, without training anything: what a
sequence's states and jobs are called depends on the sequence's content, so a sequence that is
not built yet contributes its states and jobs once it is (see :mod:`~.driver`); until then they
are counted with a placeholder content digest, which gives the same numbers.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Container, Mapping
from dataclasses import dataclass, field
from typing import Any

from seq2final.config.checks import CheckedRun, validate_parameters
from seq2final.core.errors import Seq2FinalError
from seq2final.data.fingerprints import source_change
from seq2final.data.presets import PRESETS
from seq2final.data.spec import SequenceSpec
from seq2final.methods import METHODS
from seq2final.models import ARCHITECTURES
from seq2final.runs.planner import plan_run
from seq2final.runs.plans import JobPlan, RunPlan
from seq2final.runs.result_store import ResultStore
from seq2final.runs.sequence_store import SequenceStore
from seq2final.runs.state_store import HistoricalStore

UNBUILT = "unbuilt"
"""The content digest states and jobs of a sequence not built yet are counted with."""


@dataclass(frozen=True)
class SweepRequest:
    """What a sweep covers: every combination of these lists, on one budget and dataset."""

    sequences: tuple[str, ...]
    archs: tuple[str, ...]
    methods: tuple[str, ...] = ()
    pairs: tuple[tuple[str, str], ...] = ()
    seeds: tuple[int | None, ...] = (None,)

    def asks(self) -> list[dict[str, Any]]:
        """One method request per method or historical:final pair (every registered method if
        neither: the paper's 18, Wild-Time's 8, NED's 2 and Feature Forgetting's 2)."""
        if self.pairs:
            return [{"method": None, "historical": h, "final": f} for h, f in self.pairs]
        return [{"method": m, "historical": None, "final": None} for m in self.methods or METHODS]


def parse_list(text: str, option: str, valid: list[str] | None = None) -> tuple[str, ...]:
    """A comma list (``all`` for every valid name); an unknown name is one line with the valid."""
    items = tuple(item.strip() for item in text.split(",") if item.strip())
    if not items:
        raise Seq2FinalError(f"--{option} is empty; give a comma list or 'all'")
    if valid is None:
        if "all" in items:
            raise Seq2FinalError(f"--{option} cannot be 'all'; give a comma list")
        return items
    if items == ("all",):
        return tuple(valid)
    unknown = [item for item in items if item not in valid]
    if unknown:
        raise Seq2FinalError(
            f"--{option}: unknown {', '.join(repr(u) for u in unknown)}; "
            f"valid: all, {', '.join(valid)}"
        )
    return items


def parse_request(
    sequences: str, archs: str, methods: str | None, pairs: str | None, seeds: str | None
) -> SweepRequest:
    """The sweep's lists from the command line, each checked against its registry."""
    if methods and pairs:
        raise Seq2FinalError("give --methods or --pairs, not both")
    method_list = parse_list(methods, "methods", list(METHODS)) if methods else ()
    pair_list: tuple[tuple[str, str], ...] = ()
    if pairs:
        pair_list = tuple(_pair(p) for p in parse_list(pairs, "pairs"))
    seed_list: tuple[int | None, ...] = (None,)
    if seeds:
        try:
            seed_list = tuple(int(s) for s in parse_list(seeds, "seeds"))
        except ValueError:
            raise Seq2FinalError(
                f"--seeds '{seeds}' must be whole numbers, e.g. 1007,1008"
            ) from None
    return SweepRequest(
        sequences=_sequence_list(sequences),
        archs=parse_list(archs, "archs", list(ARCHITECTURES)),
        methods=method_list,
        pairs=pair_list,
        seeds=seed_list,
    )


def _sequence_list(text: str) -> tuple[str, ...]:
    """Presets or spec strings; ``all`` is every preset (specs are checked with the parameters)."""
    if text.strip() == "all":
        return tuple(PRESETS)
    return parse_list(text, "sequences")


def _pair(text: str) -> tuple[str, str]:
    historical, sep, final = text.partition(":")
    if not sep or not historical or not final:
        raise Seq2FinalError(f"--pairs item '{text}' must be historical:final, e.g. erm:ft")
    return historical, final


@dataclass
class SequenceWork:
    """One sequence (at one seed), its parameters as checked, and everything the sweep trains
    on it (planned from that one check)."""

    run: CheckedRun
    params: dict[str, Any]
    built: bool
    plans: list[RunPlan] = field(default_factory=list)

    @property
    def spec(self) -> SequenceSpec:
        return self.run.spec


def open_jobs_by_state(plan: RunPlan, results: Container[str]) -> dict[str, JobPlan]:
    """The first unfinished job (no record in ``results``) continuing each state of ``plan``:
    a state no unfinished job continues has nothing left to train, even when its model is gone
    (a sweep resumed in a new session keeps records, not models)."""
    open_jobs: dict[str, JobPlan] = {}
    for job in plan.jobs:
        if job.state_key and job.key not in results:
            open_jobs.setdefault(job.state_key, job)
    return open_jobs


@dataclass
class SweepGraph:
    """The sweep's sequences, with the plans (states and jobs) of those already built."""

    sequences: list[SequenceWork]

    def counts(self, stores: Stores) -> dict[str, tuple[int, int]]:
        """(total, finished) for sequences, historical states and jobs. A state is finished
        when it is stored, or when every job that continues it is: its model has nothing
        left to train (states are models, which a study's kept records do not hold)."""
        states: dict[str, bool] = {}
        jobs: dict[str, bool] = {}
        for work in self.sequences:
            for plan in work.plans:
                for job in plan.jobs:
                    jobs[job.key] = work.built and job.key in stores.results
                needed = open_jobs_by_state(plan, stores.results) if work.built else {}
                for state in plan.states:
                    done = state.key in stores.states or state.key not in needed
                    states[state.key] = work.built and done and states.get(state.key, True)
        return {
            "sequences": (len(self.sequences), sum(w.built for w in self.sequences)),
            "states": (len(states), sum(states.values())),
            "jobs": (len(jobs), sum(jobs.values())),
        }

    def finished(self, stores: Stores) -> bool:
        """Whether every sequence is built and every state and job stored."""
        return all(done == total for total, done in self.counts(stores).values())


@dataclass(frozen=True)
class Stores:
    """The project's stores, as the catalog places them."""

    sequences: SequenceStore
    states: HistoricalStore
    results: ResultStore


def expand(request: SweepRequest, params: Mapping[str, Any], stores: Stores) -> SweepGraph:
    """Check every combination's parameters and resolve what is built and what each trains.

    Every check runs here, before any work: an unknown sequence or a bad option stops the sweep
    in one line, naming the combination.
    """
    sequences = []
    for name, seed in itertools.product(request.sequences, request.seeds):
        combo = {**params, "sequence": name, "seed": seed}
        try:
            run = validate_parameters(combo)
        except Seq2FinalError as error:
            raise Seq2FinalError(f"sequence '{name}': {error}") from None
        work = SequenceWork(run, {"sequence": name, "seed": run.spec.seed}, built=False)
        raw_dir = run.parameters.build_sequences.raw_dir
        work.built = is_built(run.spec, stores.sequences, raw_dir)
        work.plans = plans_of(work, request, stores)
        sequences.append(work)
    return SweepGraph(sequences)


def is_built(spec: SequenceSpec, sequences: SequenceStore, raw_dir: str) -> bool:
    """Whether the stored sequence exists and was drawn from the source data as it is now."""
    if spec.key not in sequences:
        return False
    recorded = sequences[spec.key].manifest.source_fingerprint
    return source_change(recorded, spec.dataset, spec.data_path, raw_dir, spec.data_options) is None


def plans_of(work: SequenceWork, request: SweepRequest, stores: Stores) -> list[RunPlan]:
    """The run plans of one sequence: one per architecture and method request, each planned from
    the sequence's one check of the parameters."""
    data = stores.sequences[work.spec.key].content_hash if work.built else UNBUILT
    history = None
    options = work.run.parameters.pretrain_historical
    if options is not None and options.shared_history:  # states keyed by steps 0..T−1
        history = stores.sequences[work.spec.key].history_hash if work.built else UNBUILT
    # every view of a protocol, and nothing forced: each task's own parameters name its view
    # and whether it retrains (PipelineRun.params)
    whole = dataclasses.replace(work.run, parameters=work.run.parameters.model_copy(
        update={"protocol_view": None, "force": False}))  # fmt: skip
    return [
        plan_run(whole.asking(arch, **ask), data, history)
        for arch, ask in itertools.product(request.archs, request.asks())
    ]
