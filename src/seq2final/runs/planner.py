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
    params, spec, blocks = run.parameters, run.spec, run.mode_blocks()
    arch, name = params.arch, params.protocol
    engine = params.training
    step0_space = blocks.step0.raw["space"]
    only = params.protocol_view
    problems = _problems(spec, name, run.protocol_options, only)
    if run.protocol_options.warm_start and only is not None:  # the earlier pooled jobs too
        every = _problems(spec, name, run.protocol_options)
        problems = every[: [v.name for _, v in every if v].index(only) + 1]
    wanted = list(run.jobs)
    if problems[0][1] is not None or spec.natural:
        wanted = runnable(wanted, name, params.method or params.final,
                          spec.dataset if spec.natural else None)  # fmt: skip
    states: dict[str, StatePlan] = {}
    jobs: dict[str, JobPlan] = {}
    requested = []
    whole = key_base(spec, arch, budget_key, engine.results_key(), data)
    previous: dict[str, str] = {}  # each requested job's key at the previous time (warm starts)
    for problem, view in problems:
        base = key_base(problem, arch, budget_key, engine.results_key(), data)
        # what a state is keyed by: the sequence, or its history alone (the final step unseen)
        held = base if history is None else {**base, "sequence": None, "data": history}
        # step 0 of a view is the sequence's own unless the view mixes its training images
        step0_view = view if view is not None and view.mixed_seed is not None else None
        shared_step0 = step0_key(
            held if step0_view or history is not None else whole, budget_name, step0_space
        )
        for job in wanted:
            if view is not None and len(view.steps) == 1:  # time 0: one model for every method
                job = RequestedJob(job.requested, *FIRST_MODEL)
            warm = job.historical == "none" and FINAL_MODES[job.final].pooled
            if (
                only is not None
                and view is not None
                and view.name != only
                and not (warm or len(view.steps) == 1)
            ):
                continue  # an earlier time, planned only for what a warm start continues
            warm_start = (
                previous.get(job.requested) if warm and run.protocol_options.warm_start else None
            )
            state = None
            if job.historical != "none":
                config = blocks.historical[job.historical]
                mode = HISTORICAL_MODES[job.historical]
                depends = shared_step0 if mode.uses_step0 else None
                if depends and depends not in states:
                    states[depends] = StatePlan(depends, STEP0, blocks.step0, view=step0_view)
                if (
                    mode.grow is not None
                    and view is not None
                    and view.mixed_seed is None
                    and (
                        view.steps == tuple(range(len(view.steps)))  # a prefix 0..t of the stream
                    )
                ):
                    state = _grown(states, whole, budget_name, job.historical, config, depends,
                                   view.steps[-1] - 1)  # fmt: skip
                else:
                    state = state_key(held, budget_name, job.historical, config, depends)
                    states.setdefault(
                        state, StatePlan(state, job.historical, config, depends, view)
                    )
            final_config = blocks.final[job.final]
            key = job_key(problem, base, budget_name, job.historical, job.final, state,
                          final_config, warm_start)  # fmt: skip
            previous[job.requested] = key
            if key in jobs:
                jobs[key] = replace(jobs[key], requested=(*jobs[key].requested, job.requested))
            else:
                jobs[key] = JobPlan(key, job.method, (job.requested,), job.historical, job.final,
                                    state, final_config, view, warm_start)  # fmt: skip
            if view is None or only is None or view.name == only:
                requested.append((job.requested, key))
    return RunPlan(
        sequence_key=spec.key,
        sequence_name=spec.name,
        dataset=spec.dataset,
        data_path=spec.data_path,
        data_options=spec.data_options,
        arch=arch,
        seed=spec.seed,
        budget_name=budget_name,
        budget=run.budget,
        engine=engine,
        tuning=params.tuning,
        mlflow=params.mlflow,
        plugins=tuple(params.plugins),
        force=params.force,
        states=list(states.values()),
        jobs=list(jobs.values()),
        requested=requested,
        protocol=name,
        protocol_options=run.protocol_options,
    )


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
