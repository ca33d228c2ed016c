"""The historical modes: what a method learns from steps 0..T−1 before the final step.

Fixes relative to the original code (docs/methods.md): I-FT/D-FT pre-train on steps 0..T−1 only, and every
SFT schedule starts from the same step-0 model (:func:`train_step0`, shared by every sequential
mode and trained once).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import nn

from seq2final.methods.base import (
    HISTORICAL_MODES,
    HistoricalMode,
    HistoricalTrainer,
    ModelChain,
    StepZero,
    historical_mode,
)
from seq2final.methods.context import Context, space_of
from seq2final.methods.schedules import selected_schedules, step_space
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
        space = space_of(config, "space", f"historical_modes.{objective}")
        model = ctx.tuned_fit(objective, space, lambda: ctx.new_model(objective), task)
        return {"main": ModelChain([model])}

    return train


for _name, _text in (
    ("erm", "one ERM model on steps 0..T−1 combined"),
    ("irm", "one IRM model on steps 0..T−1, one environment per step"),
    ("dro", "one worst-domain DRO model on steps 0..T−1"),
):
    historical_mode(_name, _text, terms=(_name,))(_one_model(_name))


@historical_mode(
    "sequential",
    "a chain of models, each fine-tuned from the previous on its step (SFT)",
    uses_step0=True,
)
def _sequential(
    ctx: Context, config: Mapping[str, Any], step0: StepZero | None
) -> dict[str, ModelChain]:
    assert step0 is not None
    chains = {}
    for name, schedule in selected_schedules(config, ctx.budget_name).items():
        models = [step0()]
        for t in range(1, ctx.final_index):
            start = models[-1]
            task = Task([ctx.split(t, "train")], ctx.split(t, "valid"))
            space = step_space(config, schedule, t, "historical_modes.sequential")
            models.append(
                ctx.tuned_fit(f"{name}/step{t}", space, lambda s=start: clone_model(s), task)
            )
        final_space = step_space(config, schedule, ctx.final_index, "historical_modes.sequential")
        chains[name] = ModelChain(models, final_space.describe())
    return chains


@historical_mode(
    "sequential_ewc",
    "a sequential chain with EWC towards every earlier step (EWC)",
    uses_step0=True,
    terms=("ewc",),
)
def _sequential_ewc(
    ctx: Context, config: Mapping[str, Any], step0: StepZero | None
) -> dict[str, ModelChain]:
    assert step0 is not None
    space = space_of(config, "space", "historical_modes.sequential_ewc")
    models = [step0()]
    anchors = [
        (
            parameters_of(models[0]),
            fisher_information(models[0], ctx.split(0, "train").to(ctx.device), ctx.engine),
        )
    ]
    for t in range(1, ctx.final_index):
        start = models[-1]
        task = Task([ctx.split(t, "train")], ctx.split(t, "valid"), terms=[Ewc(anchors)])
        model = ctx.tuned_fit(f"step{t}", space, lambda s=start: clone_model(s), task)
        models.append(model)
        data = ctx.split(t, "train").to(ctx.device)
        anchors.append((parameters_of(model), fisher_information(model, data, ctx.engine)))
    return {"main": ModelChain(models, space.describe(), anchors)}


def _sequential_side(side_module: str) -> HistoricalTrainer:
    def train(
        ctx: Context, config: Mapping[str, Any], step0: StepZero | None
    ) -> dict[str, ModelChain]:
        assert step0 is not None
        space = space_of(config, "space", "historical_modes.sequential_side")
        models: list[nn.Module] = [step0()]
        for t in range(1, ctx.final_index):
            models.append(side_fit(ctx, f"step{t}", models[-1], side_module, t, space))
        return {"main": ModelChain(models)}

    return train


historical_mode(
    "sequential_side_1",
    "a chain of 1-layer side modules, one per step (SST-1)",
    leaves="side_chain",
    side_module="one_layer",
    uses_step0=True,
    block_equivalent="sequential_side_b",
    terms=("joint", "adjacency"),
)(_sequential_side("one_layer"))
historical_mode(
    "sequential_side_b",
    "a chain of block side modules, one per step (SST-B)",
    leaves="side_chain",
    side_module="block",
    uses_step0=True,
    terms=("joint", "adjacency"),
)(_sequential_side("block"))


def train_step0(ctx: Context, space: SearchSpace) -> nn.Module:
    """The step-0 model every sequential mode starts from: ERM on the source step alone."""
    task = Task([ctx.split(0, "train")], ctx.split(0, "valid"))
    return ctx.tuned_fit("step0", space, lambda: ctx.new_model("step0"), task)
