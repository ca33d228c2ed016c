"""The historical modes: what a method learns from steps 0..T−1 before the final step.

Fixes relative to the original code (docs/methods.md): I-FT/D-FT pre-train on steps 0..T−1 only, and every
SFT schedule starts from the same step-0 model (:func:`train_step0`, shared by every sequential
mode and trained once).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from torch import nn

from seq2final.methods.blocks import space_of
from seq2final.methods.context import Context
from seq2final.methods.final import stage_name
from seq2final.methods.modes import (
    HISTORICAL_MODES,
    ChainStep,
    HistoricalMode,
    HistoricalTrainer,
    ModelChain,
    StepZero,
    chain_mode,
    from_step0,
    historical_mode,
)
from seq2final.methods.schedules import ScheduleSettings, selected_schedules, step_space
from seq2final.methods.side_tuning import side_fit
from seq2final.training.loop import clone_model
from seq2final.training.objectives import Task, fisher_information, parameters_of
from seq2final.training.search import SearchSpace
from seq2final.training.terms import Ewc

HISTORICAL_MODES.add(
    "none",
    HistoricalMode(
        "none",
        "no historical state: the final mode sees the steps itself, or only the final step",
        "nothing",
        config_keys=(),
    ),
)


def _one_model(objective: str) -> HistoricalTrainer:
    """One model on steps 0..T−1: combined for ERM, one domain per step for IRM and DRO."""

    def train(
        ctx: Context, config: Mapping[str, Any], step0: StepZero | None
    ) -> dict[str, ModelChain]:
        steps = range(ctx.final_index)
        if objective == "erm":
            domains = [ctx.history("train")]
        else:
            domains = [ctx.split(t, "train") for t in steps]
        task = Task(domains, ctx.history("valid"), objective=objective)
        space = space_of(config, "space")
        model = ctx.tuned_fit(objective, space, lambda: ctx.new_model(objective), task)
        return {"main": ModelChain([model])}

    return train


for _name, _text in (
    ("erm", "one ERM model on steps 0..T−1 combined"),
    ("irm", "one IRM model on steps 0..T−1, one environment per step"),
    ("dro", "one worst-domain DRO model on steps 0..T−1"),
):
    historical_mode(_name, _text, terms=(_name,))(_one_model(_name))


def fine_tuned_step(
    ctx: Context, name: str, chain: ModelChain, t: int, space: SearchSpace, task: Task
) -> ModelChain:
    """Chain ``name`` one step longer: its last model fine-tuned on ``task`` (step ``t``'s)."""
    start = chain.last
    model = ctx.tuned_fit(stage_name(name, f"step{t}"), space, lambda: clone_model(start), task)
    return replace(chain, models=[*chain.models, model])


def _schedule_starts(
    ctx: Context, config: Mapping[str, Any], step0: StepZero | None
) -> dict[str, ModelChain]:
    """One chain per schedule the budget runs, each starting from the step-0 model."""
    assert step0 is not None
    return {
        name: ModelChain([step0()], step_space(config, schedule, 1).describe())
        for name, schedule in selected_schedules(config, ctx.budget_name).items()
    }


@chain_mode(
    "sequential",
    "a chain of models, each fine-tuned from the previous on its step (SFT)",
    start=_schedule_starts,
    uses_step0=True,
    settings=ScheduleSettings,
)
def _sequential(
    ctx: Context, config: Mapping[str, Any], name: str, chain: ModelChain, t: int
) -> ModelChain:
    schedule = selected_schedules(config, ctx.budget_name)[name]
    task = Task([ctx.split(t, "train")], ctx.split(t, "valid"))
    grown = fine_tuned_step(ctx, name, chain, t, step_space(config, schedule, t), task)
    # the continuation of the chain (the final step, or the next time's) gets the next step's rate
    return replace(grown, final_space=step_space(config, schedule, t + 1).describe())


def _ewc_start(
    ctx: Context, config: Mapping[str, Any], step0: StepZero | None
) -> dict[str, ModelChain]:
    """The step-0 model, anchored with its Fisher information on step 0."""
    assert step0 is not None
    model = step0()
    data = ctx.split(0, "train").to(ctx.device)
    anchor = (parameters_of(model), fisher_information(model, data, ctx.engine))
    return {"main": ModelChain([model], space_of(config, "space").describe(), [anchor])}


@chain_mode(
    "sequential_ewc",
    "a sequential chain with EWC towards every earlier step (EWC)",
    start=_ewc_start,
    uses_step0=True,
    terms=("ewc",),
)
def _sequential_ewc(
    ctx: Context, config: Mapping[str, Any], name: str, chain: ModelChain, t: int
) -> ModelChain:
    task = Task([ctx.split(t, "train")], ctx.split(t, "valid"), penalties=[Ewc(chain.anchors)])
    grown = fine_tuned_step(ctx, name, chain, t, space_of(config, "space"), task)
    data = ctx.split(t, "train").to(ctx.device)
    anchor = (parameters_of(grown.last), fisher_information(grown.last, data, ctx.engine))
    return replace(grown, anchors=[*chain.anchors, anchor])


def _sequential_side(side_module: str) -> ChainStep:
    def step(
        ctx: Context, config: Mapping[str, Any], name: str, chain: ModelChain, t: int
    ) -> ModelChain:
        space = space_of(config, "space")
        model = side_fit(ctx, f"step{t}", chain.last, side_module, t, space)
        return replace(chain, models=[*chain.models, model])

    return step


chain_mode(
    "sequential_side_1",
    "a chain of 1-layer side modules, one per step (SST-1)",
    start=from_step0,
    leaves="side_chain",
    side_module="one_layer",
    uses_step0=True,
    block_equivalent="sequential_side_b",
    terms=("joint", "adjacency"),
)(_sequential_side("one_layer"))
chain_mode(
    "sequential_side_b",
    "a chain of block side modules, one per step (SST-B)",
    start=from_step0,
    leaves="side_chain",
    side_module="block",
    uses_step0=True,
    terms=("joint", "adjacency"),
)(_sequential_side("block"))


def train_step0(ctx: Context, space: SearchSpace) -> nn.Module:
    """The step-0 model every sequential mode starts from: ERM on the source step alone."""
    task = Task([ctx.split(0, "train")], ctx.split(0, "valid"))
    return ctx.tuned_fit("step0", space, lambda: ctx.new_model("step0"), task)
