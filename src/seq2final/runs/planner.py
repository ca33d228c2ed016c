"""Planning a run: the run parameters resolved into keyed states and jobs, before any work.

The pipelines plan first and train later: :func:`plan_run` reads no data and trains nothing, so
everything a run will do is known (and checked) in seconds, and the stores can tell which of it
is finished already.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from seq2final.config.checks import check_mode_configs
from seq2final.core.errors import MissingPrerequisiteError, Seq2FinalError
from seq2final.data.spec import SequenceSpec
from seq2final.methods import HISTORICAL_MODES, HistoricalState, requested_jobs
from seq2final.runs.keys import job_key, key_base, state_key, step0_key
from seq2final.runs.plans import STEP0, JobPlan, RunPlan, StatePlan
from seq2final.training.engine import Engine
from seq2final.training.search import get_budget


def plan_run(
    spec: SequenceSpec,
    request: Mapping[str, Any],
    budgets: Mapping[str, Any],
    training: Mapping[str, Any],
    tuning: Mapping[str, Any],
    historical_modes: Mapping[str, Any],
    final_modes: Mapping[str, Any],
    step0_space: Mapping[str, Any],
    data: str,
) -> RunPlan:
    """Resolve the run parameters into keyed states and jobs (no training, no data loading).

    ``data`` is the content hash of the stored sequence (its manifest's ``content_hash``).
    """
    budget_name = request["budget"]
    budget = get_budget(budgets, budget_name).results_key()
    engine = Engine(**training)
    try:
        engine.torch_device()  # the device and precision exist here, before anything trains
    except Seq2FinalError as error:
        raise Seq2FinalError(f"parameter 'training': {error}") from None
    arch = request["arch"]
    check_mode_configs(historical_modes, final_modes, step0_space, spec.num_targets, budget_name)
    base = key_base(spec, arch, budget, engine.results_key(), data)
    shared_step0 = step0_key(base, budget_name, step0_space)
    states: dict[str, StatePlan] = {}
    jobs: dict[str, JobPlan] = {}
    requested = []
    for job in requested_jobs(request["method"], request["historical"], request["final"], arch):
        state = None
        if job.historical != "none":
            # a mode with no settings (config_keys empty) may have no YAML block
            config = dict(historical_modes.get(job.historical, {}))
            depends = shared_step0 if HISTORICAL_MODES[job.historical].uses_step0 else None
            if depends and depends not in states:
                states[depends] = StatePlan(depends, STEP0, {"space": dict(step0_space)})
            state = state_key(base, budget_name, job.historical, config, depends)
            states.setdefault(state, StatePlan(state, job.historical, config, depends))
        final_config = dict(final_modes.get(job.final, {}))
        key = job_key(spec, base, budget_name, job.historical, job.final, state, final_config)
        if key in jobs:
            jobs[key] = replace(jobs[key], requested=(*jobs[key].requested, job.requested))
        else:
            jobs[key] = JobPlan(
                key, job.method, (job.requested,), job.historical, job.final, state, final_config
            )
        requested.append((job.requested, key))
    return RunPlan(
        sequence_key=spec.key,
        sequence_name=spec.name,
        dataset=spec.dataset,
        data_path=spec.data_path,
        arch=arch,
        seed=spec.seed,
        budget_name=budget_name,
        budget=budget,
        engine=engine.model_dump(),
        tuning=dict(tuning),
        force=bool(request.get("force", False)),
        states=list(states.values()),
        jobs=list(jobs.values()),
        requested=requested,
    )


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
