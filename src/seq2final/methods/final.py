"""The final modes: how a method fits the final step T, from scratch or continuing history.

A final mode that continues a historical state continues every chain it holds (SFT: every
schedule) and keeps the one best on the final step's *validation* accuracy
(:func:`continue_chains`), never on test.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from pydantic import Field
from torch import nn

from seq2final.core.schema import StrictModel
from seq2final.methods.blocks import settings_of, space_of
from seq2final.methods.context import Context
from seq2final.methods.modes import (
    FinalOutcome,
    FinalRunner,
    HistoricalState,
    ModelChain,
    final_mode,
)
from seq2final.methods.side_tuning import side_fit
from seq2final.models import JointModel, build_model
from seq2final.training.engine import accuracy
from seq2final.training.loop import clone_model
from seq2final.training.objectives import Task
from seq2final.training.records import ChosenChain
from seq2final.training.search import SearchSpace
from seq2final.training.tensors import TensorSplit
from seq2final.training.terms import Adjacency


def stage_name(chain: str, stage: str) -> str:
    """A fit's stage name within chain ``chain`` (``main`` chains keep the bare stage name)."""
    return stage if chain == "main" else f"{chain}/{stage}"


def chain_space(chain: ModelChain, config: Mapping[str, Any], key: str) -> SearchSpace:
    """The space a chain is continued with: the chain's own (SFT schedule, EWC) or the mode's."""
    if chain.final_space is not None:
        return SearchSpace.parse(chain.final_space, "chain")
    return space_of(config, key)


def continue_chains(
    ctx: Context,
    state: HistoricalState,
    fit_chain: Callable[[str, ModelChain], nn.Module],
    step: int | None,
    score: Callable[[nn.Module], float] | None = None,
) -> FinalOutcome:
    """Continue every chain of ``state`` with ``fit_chain(name, chain)`` and keep the best on
    final *validation* accuracy (every chain's model is kept as a candidate for the record):
    the last fit's, or ``score(model)`` for a mode whose model is not its last fit's (SWA's
    average)."""
    candidates: dict[str, tuple[nn.Module, float]] = {}
    best: str | None = None
    for name, chain in state.chains.items():
        model = fit_chain(name, chain)
        accuracy = ctx.fits[-1].valid_accuracy if score is None else score(model)
        candidates[name] = (model, accuracy)
        if best is None or candidates[name][1] > candidates[best][1]:
            best = name
    assert best is not None
    model, accuracy = candidates[best]
    chosen = ChosenChain(chain=best if len(candidates) > 1 or best != "main" else None)
    return FinalOutcome(model, step, chosen, accuracy, candidates if len(candidates) > 1 else {})


def _scratch_on(step: int | str) -> FinalRunner:
    def run(ctx: Context, config: Mapping[str, Any], state: HistoricalState | None) -> FinalOutcome:
        task = Task([ctx.split(step, "train")], ctx.split(step, "valid"))
        space = space_of(config, "space")
        return FinalOutcome(
            ctx.tuned_fit("final", space, lambda: ctx.new_model("final"), task), None
        )

    return run


final_mode("scratch", "train from scratch on the final step only", ("nothing",))(_scratch_on(-1))
final_mode(
    "scratch_oracle",
    "train from scratch on the final step at oracle size",
    ("nothing",),
    uses_oracle=True,
)(_scratch_on("oracle"))


def _all_steps(objective: str) -> FinalRunner:
    def run(ctx: Context, config: Mapping[str, Any], state: HistoricalState | None) -> FinalOutcome:
        steps = [ctx.split(t, "train") for t in range(ctx.sequence.num_steps)]
        domains = [TensorSplit.concat(steps)] if objective == "erm" else steps
        task = Task(domains, ctx.split(-1, "valid"), objective=objective)
        space = space_of(config, "space")
        return FinalOutcome(
            ctx.tuned_fit("final", space, lambda: ctx.new_model("final"), task), None
        )

    return run


for _objective in ("erm", "irm", "dro"):
    final_mode(
        f"all_{_objective}",
        f"{_objective.upper()} on all steps 0..T (the final step's validation set selects)",
        ("nothing",),
        terms=(_objective,),
        pooled=True,
    )(_all_steps(_objective))


@final_mode("ft", "fine-tune every layer on the final step", ("model",))
def _fine_tune(
    ctx: Context, config: Mapping[str, Any], state: HistoricalState | None
) -> FinalOutcome:
    assert state is not None
    train, valid = ctx.split(-1, "train"), ctx.split(-1, "valid")

    def fit_chain(name: str, chain: ModelChain) -> nn.Module:
        return fine_tune_chain(ctx, config, name, chain, Task([train], valid))

    return continue_chains(ctx, state, fit_chain, None)


def fine_tune_chain(
    ctx: Context, config: Mapping[str, Any], name: str, chain: ModelChain, task: Task
) -> nn.Module:
    """Fine-tune chain ``name``'s last model on ``task`` (the final step), in the chain's space or
    the mode's, pulled towards the chain's anchors (EWC's, SI's) as its space's λ says: what
    every final mode that continues a plain model does, whatever else its task adds."""
    space = chain_space(chain, config, "space")
    task = replace(task, penalties=[*task.penalties, chain.pull()])
    return ctx.tuned_fit(stage_name(name, "final"), space, lambda: clone_model(chain.last), task)


@final_mode(
    "as_is",
    "score the historical model on the final step unchanged: no final training",
    ("model",),
    config_keys=(),
)
def _as_is(ctx: Context, config: Mapping[str, Any], state: HistoricalState | None) -> FinalOutcome:
    """Control+Shift's question, how far a model trained on one support falls on another, asks
    for a model that never sees the shifted step (docs/intensity.md): the historical chain's last
    model, the best chain on the final step's validation split where there are several."""
    assert state is not None
    valid = ctx.split(-1, "valid")
    return continue_chains(
        ctx, state, lambda name, chain: chain.last, None,
        score=lambda model: accuracy(model, valid, ctx.engine),
    )  # fmt: skip


@final_mode(
    "lp_ft",
    "fit the head on the final step (linear probe), then fine-tune every layer from it",
    ("model",),
    config_keys=("head_space", "space"),
)
def _linear_probe_fine_tune(
    ctx: Context, config: Mapping[str, Any], state: HistoricalState | None
) -> FinalOutcome:
    assert state is not None
    train, valid = ctx.split(-1, "train"), ctx.split(-1, "valid")

    def fit_chain(name: str, chain: ModelChain) -> nn.Module:
        probe = Task([train], valid, trainable=["fc"], penalties=[chain.pull()])
        head = ctx.tuned_fit(
            stage_name(name, "head"),
            space_of(config, "head_space"),
            lambda: clone_model(chain.last),
            probe,
        )
        task = Task([train], valid, penalties=[chain.pull()])
        space = chain_space(chain, config, "space")
        return ctx.tuned_fit(stage_name(name, "all"), space, lambda: clone_model(head), task)

    return continue_chains(ctx, state, fit_chain, None)


def _side_final(side_module: str) -> FinalRunner:
    def run(ctx: Context, config: Mapping[str, Any], state: HistoricalState | None) -> FinalOutcome:
        assert state is not None
        space = space_of(config, "space")
        final = ctx.final_index

        def fit_chain(name: str, chain: ModelChain) -> nn.Module:
            return side_fit(ctx, stage_name(name, "final"), chain.last, side_module, final, space)

        outcome = continue_chains(ctx, state, fit_chain, None)
        joint = outcome.model
        assert isinstance(joint, JointModel)  # side_fit makes every chain's model a joint one
        outcome.step = joint.num_steps - 1
        return outcome

    return run


final_mode(
    "side_1",
    "freeze the historical model, add 1-layer side modules with a new stem and head",
    ("model", "side_chain"),
    side_module="one_layer",
    block_equivalent="side_b",
    terms=("joint", "adjacency"),
)(_side_final("one_layer"))
final_mode(
    "side_b",
    "freeze the historical model, add block side modules with a new stem and head",
    ("model", "side_chain"),
    side_module="block",
    terms=("joint", "adjacency"),
)(_side_final("block"))


class JointSettings(StrictModel):
    """A joint model's weight of the final step's loss against each earlier step's 1."""

    final_weight: float = Field(default=3.0, gt=0)


def _joint(name: str, mode: str, side_module: str, stem_head: str) -> FinalRunner:
    def run(ctx: Context, config: Mapping[str, Any], state: HistoricalState | None) -> FinalOutcome:
        steps = ctx.sequence.num_steps
        names = list(build_model(ctx.arch, ctx.num_classes).layer_names)
        final_weight = settings_of(JointSettings, config).final_weight
        weights = [1.0] * (steps - 1) + [final_weight]
        task = Task(
            [ctx.split(t, "train") for t in range(steps)],
            ctx.split(-1, "valid"),
            objective="joint",
            steps=list(range(steps)),
            valid_step=steps - 1,
            step_weights=weights,
            penalties=[Adjacency()],
        )

        def make() -> nn.Module:
            return ctx.seeded(
                "final",
                lambda: JointModel(
                    ctx.arch, ctx.num_classes, steps, [names] * (steps - 1), mode, side_module,
                    stem_head,
                ),
            )  # fmt: skip

        model = ctx.tuned_fit("final", space_of(config, "space"), make, task)
        return FinalOutcome(model, steps - 1)

    return run


final_mode(
    "joint",
    "one joint model over all steps, separate modules per step, adjacent L2 (JM)",
    ("nothing",),
    terms=("joint", "adjacency"),
    settings=JointSettings,
)(_joint("joint", "separate", "block", "separate"))
final_mode(
    "joint_side_1",
    "one joint model over all steps with 1-layer side modules (JST-1)",
    ("nothing",),
    side_module="one_layer",
    block_equivalent="joint_side_b",
    terms=("joint", "adjacency"),
    settings=JointSettings,
)(_joint("joint_side_1", "side_tune", "one_layer", "summed"))
final_mode(
    "joint_side_b",
    "one joint model over all steps with block side modules (JST-B)",
    ("nothing",),
    side_module="block",
    terms=("joint", "adjacency"),
    settings=JointSettings,
)(_joint("joint_side_b", "side_tune", "block", "summed"))
