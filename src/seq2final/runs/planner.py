"""Planning a run: the run parameters resolved into keyed states and jobs, before any work.

The pipelines plan first and train later: :func:`plan_run` reads no data and trains nothing, so
everything a run will do is known (and checked) in seconds, and the stores can tell which of it
is finished already.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from seq2final.config.checks import CheckedRun
from seq2final.core.errors import MissingPrerequisiteError, Seq2FinalError
from seq2final.core.seeds import derived_seed
from seq2final.data.spec import SequenceSpec
from seq2final.methods import (
    FINAL_MODES,
    HISTORICAL_MODES,
    HistoricalState,
    JobNames,
    ModeBlock,
    RequestedJob,
)
from seq2final.protocols import (
    FIRST_MODEL,
    PROTOCOLS,
    ProtocolOptions,
    chosen_views,
    runnable,
)
from seq2final.runs.keys import grown_state_key, job_key, key_base, state_key, step0_key
from seq2final.runs.plans import STEP0, JobPlan, RunPlan, StatePlan
from seq2final.training.records import StepView


def plan_run(run: CheckedRun, data: str, history: str | None = None) -> RunPlan:
    """Resolve a checked run into keyed states and jobs (no training, no data loading).

    ``data`` is the content hash of the stored sequence (its manifest's ``content_hash``).
    ``history``, where given, is that of steps 0..T−1 (:attr:`ShiftSequence.history_hash`): the
    historical states and the step-0 model are then keyed by it in place of the whole sequence,
    so every sequence with the same history shares them (``pretrain_historical.shared_history``,
    under the ``final`` protocol only; the jobs stay keyed by the whole sequence).
    Under a temporal protocol every view it trains is planned as a sequence of its own: its
    states and jobs are keyed by the view, so views that protocols share are trained once, and
    the step-0 model is shared by every view that starts at step 0 as it is.

    Everything is read from ``run`` as it was checked (:func:`~seq2final.config.checks.
    validate_parameters`): the budget, engine and parsed mode blocks are not built again.

    Each state and job also gets the key it would have under any budget (``seed_key``): its fits'
    initialisations and trial seeds come from it, not from the key, so one configuration of one
    fit trains the same under every budget, and its first *k* epochs are the same wherever it
    is trained (a halving budget's rungs, a grid's full fits; docs/methods.md, "Tuning").
    """
    plan = replace(
        _plan(run, data, history, run.budget.results_key(), run.parameters.budget),
        shared_history=history is not None,
    )
    free = _plan(run, data, history, {}, "")  # the budget is one for the whole plan: same order
    return replace(
        plan,
        states=[replace(state, seed_key=other.key)
                for state, other in zip(plan.states, free.states, strict=True)],
        jobs=[replace(job, seed_key=other.key)
              for job, other in zip(plan.jobs, free.jobs, strict=True)],
    )  # fmt: skip


def _plan(
    run: CheckedRun,
    data: str,
    history: str | None,
    budget_key: Mapping[str, Any],
    budget_name: str,
) -> RunPlan:
    """:func:`plan_run`'s states and jobs, keyed with ``budget_key`` under ``budget_name``."""
    return _Planning(run, data, history, budget_key, budget_name).plan()


class _Planning:
    """One planning of a checked run, as steps a reader follows: the problems (the sequence, or
    the protocol's views), the jobs wanted on them, then per problem and job its historical
    state (step-0 model first) and its job; the states and jobs collect here, each once."""

    def __init__(
        self, run: CheckedRun, data: str, history: str | None, budget_key: Mapping[str, Any],
        budget_name: str,
    ) -> None:  # fmt: skip
        self.run, self.data, self.history = run, data, history
        self.budget_key, self.budget_name = budget_key, budget_name
        self.blocks = run.mode_blocks()
        self.states: dict[str, StatePlan] = {}
        self.jobs: dict[str, JobPlan] = {}
        self.requested: list[tuple[str, str]] = []
        self.previous: dict[str, str] = {}  # each requested job's key at the previous time
        self.whole = self._base(run.spec)

    def _base(self, problem: SequenceSpec) -> dict[str, Any]:
        params = self.run.parameters
        return key_base(problem, params.arch, self.budget_key, params.training.results_key(),
                        self.data)  # fmt: skip

    def plan(self) -> RunPlan:
        problems = run_problems(self.run)
        wanted = wanted_jobs(self.run, problems[0][1])
        for problem, view in problems:
            self._plan_problem(problem, view, wanted)
        return self._run_plan()

    def _plan_problem(
        self, problem: SequenceSpec, view: StepView | None, wanted: list[RequestedJob]
    ) -> None:
        """Every wanted job on one problem, with the state each continues."""
        base = self._base(problem)
        # what a state is keyed by: the sequence, or its history alone (the final step unseen)
        held = base if self.history is None else {**base, "sequence": None, "data": self.history}
        # step 0 of a view is the sequence's own unless the view mixes its training images
        step0_view = view if view is not None and view.mixed_seed is not None else None
        shared_step0 = step0_key(
            held if step0_view or self.history is not None else self.whole, self.budget_name,
            self.blocks.step0.raw["space"],
        )  # fmt: skip
        for job in view_jobs(self.run, view, wanted):
            warm_start = None
            if _warm(job) and self.run.protocol_options.warm_start:
                warm_start = self.previous.get(job.requested)
            state = self._state(job, view, held, shared_step0, step0_view)
            self._add_job(job, problem, base, view, state, warm_start)

    def _state(
        self, job: RequestedJob, view: StepView | None, held: Mapping[str, Any],
        shared_step0: str, step0_view: StepView | None,
    ) -> str | None:  # fmt: skip
        """The key of the historical state ``job`` continues (None: it continues none), planned
        with the step-0 model it starts from; a growing chain's on a stream's prefix grows the
        previous prefix's state."""
        if job.historical == "none":
            return None
        config = self.blocks.historical[job.historical]
        mode = HISTORICAL_MODES[job.historical]
        depends = shared_step0 if mode.uses_step0 else None
        if depends and depends not in self.states:
            self.states[depends] = StatePlan(depends, STEP0, self.blocks.step0, view=step0_view)
        prefix = view is not None and view.steps == tuple(range(len(view.steps)))  # 0..t
        if mode.grow is not None and view is not None and view.mixed_seed is None and prefix:
            return _grown(self.states, self.whole, self.budget_name, job.historical, config,
                          depends, view.steps[-1] - 1)  # fmt: skip
        state = state_key(held, self.budget_name, job.historical, config, depends)
        self.states.setdefault(state, StatePlan(state, job.historical, config, depends, view))
        return state

    def _add_job(
        self, job: RequestedJob, problem: SequenceSpec, base: Mapping[str, Any],
        view: StepView | None, state: str | None, warm_start: str | None,
    ) -> None:  # fmt: skip
        """The job's plan (a job two requests share is planned once, asked by both)."""
        only = self.run.parameters.protocol_view
        final_config = self.blocks.final[job.final]
        key = job_key(problem, base, self.budget_name, job.historical, job.final, state,
                      final_config, warm_start)  # fmt: skip
        self.previous[job.requested] = key
        if key in self.jobs:
            known = self.jobs[key]
            self.jobs[key] = replace(known, requested=(*known.requested, job.requested))
        else:
            self.jobs[key] = JobPlan(key, job.method, (job.requested,), job.historical,
                                     job.final, state, final_config, view, warm_start)  # fmt: skip
        if view is None or only is None or view.name == only:
            self.requested.append((job.requested, key))

    def _run_plan(self) -> RunPlan:
        params, spec = self.run.parameters, self.run.spec
        return RunPlan(
            sequence_key=spec.key,
            sequence_name=spec.name,
            dataset=spec.dataset,
            data_path=spec.data_path,
            data_options=spec.data_options,
            arch=params.arch,
            seed=spec.seed,
            budget_name=self.budget_name,
            budget=self.run.budget,
            engine=params.training,
            tuning=params.tuning,
            mlflow=params.mlflow,
            plugins=tuple(params.plugins),
            force=params.force,
            states=list(self.states.values()),
            jobs=list(self.jobs.values()),
            requested=self.requested,
            protocol=params.protocol,
            protocol_options=self.run.protocol_options,
        )


def run_problems(run: CheckedRun) -> list[tuple[SequenceSpec, StepView | None]]:
    """The problems a run trains: the sequence, or the protocol's views (one only under
    ``protocol_view``, with the earlier ones a warm start continues)."""
    only, name = run.parameters.protocol_view, run.parameters.protocol
    problems = _problems(run.spec, name, run.protocol_options, only)
    if run.protocol_options.warm_start and only is not None:  # the earlier pooled jobs too
        every = _problems(run.spec, name, run.protocol_options)
        problems = every[: [v.name for _, v in every if v].index(only) + 1]
    return problems


def wanted_jobs(run: CheckedRun, first_view: StepView | None) -> list[RequestedJob]:
    """The jobs asked for, less those the protocol or a natural sequence cannot run."""
    params, spec = run.parameters, run.spec
    wanted = list(run.jobs)
    if first_view is not None or spec.natural:
        wanted = runnable(wanted, params.protocol, params.method or params.final,
                          spec.dataset if spec.natural else None)  # fmt: skip
    return wanted


def view_jobs(
    run: CheckedRun, view: StepView | None, wanted: list[RequestedJob]
) -> list[RequestedJob]:
    """The wanted jobs as planned on one problem: at time 0 (a view of one step) every method's
    is the one model :data:`~seq2final.protocols.FIRST_MODEL`; under ``protocol_view`` an earlier
    view plans only what a warm start continues."""
    only = run.parameters.protocol_view
    jobs = []
    for job in wanted:
        if view is not None and len(view.steps) == 1:  # time 0: one model for every method
            job = RequestedJob(job.requested, *FIRST_MODEL)
        elif only is not None and view is not None and view.name != only and not _warm(job):
            continue  # an earlier time, planned only for what a warm start continues
        jobs.append(job)
    return jobs


def _warm(job: RequestedJob) -> bool:
    """Whether ``job`` can start from its previous time's model: a pooled final mode with no
    historical state."""
    return job.historical == "none" and FINAL_MODES[job.final].pooled


def planned_names(run: CheckedRun) -> list[tuple[JobNames, str | None]]:
    """Each name a run's jobs will go by with each view it is trained in, read from the checked
    run without planning it (no key is made: :func:`plan_run` runs once, in the pipeline's
    ``plan_jobs`` node). A view of one step trains one model for every method
    (:data:`~seq2final.protocols.FIRST_MODEL`); a job two requests share goes by its one name
    (:meth:`~seq2final.methods.JobNames.of`). What the tracking hook checks before any work."""
    problems = run_problems(run)
    wanted = wanted_jobs(run, problems[0][1])
    names: dict[tuple[str, str | None], JobNames] = {}
    for _, view in problems:
        by_method: dict[str, list[str]] = {}  # a job's modes make its key: one job per method
        for job in view_jobs(run, view, wanted):
            by_method.setdefault(job.method, []).append(job.requested)
        for method, asked in by_method.items():
            job_names = JobNames.of(method, asked)
            names.setdefault((job_names.name, view.name if view else None), job_names)
    return [(job_names, view) for (_, view), job_names in names.items()]


def _grown(
    states: dict[str, StatePlan],
    whole: Mapping[str, Any],
    budget_name: str,
    mode: str,
    config: ModeBlock,
    step0: str | None,
    last_step: int,
) -> str:
    """Plans a growing chain's states of steps 0..0, 0..1, …, 0..``last_step`` (those not yet
    planned), each extending the one before by a step, and returns the last one's key."""
    key: str | None = None
    for k in range(last_step + 1):
        start = step0 if k == 0 else key
        key = grown_state_key(whole, budget_name, mode, config, start, k)
        seen = StepView(name=f"0-{k}", steps=tuple(range(k + 1)))
        states.setdefault(key, StatePlan(key, mode, config, step0 if k == 0 else None, seen,
                                         extends=None if k == 0 else start))  # fmt: skip
    assert key is not None
    return key


def _problems(
    spec: SequenceSpec, protocol: str, options: ProtocolOptions, only: str | None = None
) -> list[tuple[SequenceSpec, StepView | None]]:
    """The Seq-to-Final problems a protocol trains: the sequence itself, or each of its views
    (``only`` the one so named, if given) as a spec of its own (the view's steps, its name in
    the key)."""
    chosen = PROTOCOLS[protocol]
    views = chosen_views(chosen.views(len(spec.steps), options), only, protocol)
    if not chosen.temporal:
        return [(spec, None)]
    if not spec.step_tests:
        raise Seq2FinalError(
            f"protocol '{protocol}' tests on every step, and sequence '{spec.key}' was built "
            "without step test splits; build it under the same protocol"
        )
    return [
        (
            replace(spec, steps=tuple(spec.steps[s] for s in view.steps), view=view.name),
            StepView(
                name=view.name,
                steps=view.steps,
                mixed_seed=derived_seed(spec.seed, "mixed", view.name) if view.mixed else None,
            ),
        )  # fmt: skip
        for view in views
    ]


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
