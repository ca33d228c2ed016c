"""Side-tuning one more step: freeze what came before, add side modules, fit the new step.

ST, SST and the side final modes all grow a joint model by one step at a time, as in the original code:
the previous model's modules are loaded and frozen, the new step gets side modules on its blocks
and a re-learned stem and head, and only those train.
"""

from __future__ import annotations

from torch import nn

from seq2final.methods.context import Context
from seq2final.models import JointModel, layer_names
from seq2final.training.objectives import Task
from seq2final.training.search import SearchSpace
from seq2final.training.terms import Adjacency


def extended_model(ctx: Context, previous: nn.Module, side_module: str) -> JointModel:
    """A joint model one step longer than ``previous``, its earlier modules loaded and frozen."""
    steps = previous.num_steps + 1 if isinstance(previous, JointModel) else 2
    names = layer_names(previous)
    model = JointModel(
        ctx.arch,
        ctx.num_classes,
        steps,
        [names] * (steps - 1),
        "side_tune",
        side_module,
        "separate",
    )
    model.load_previous(previous, freeze=True)
    return model.to(ctx.device)


def side_fit(
    ctx: Context, stage: str, previous: nn.Module, side_module: str, step: int, space: SearchSpace
) -> JointModel:
    """Tune the side modules, stem and head that extend ``previous`` to sequence step ``step``."""
    steps = previous.num_steps + 1 if isinstance(previous, JointModel) else 2
    task = Task(
        [ctx.split(step, "train")],
        ctx.split(step, "valid"),
        objective="joint",
        steps=[steps - 1],
        valid_step=steps - 1,
        penalties=[Adjacency()],
    )
    return ctx.tuned_fit(
        stage,
        space,
        lambda: ctx.seeded(stage, lambda: extended_model(ctx, previous, side_module)),
        task,
    )
