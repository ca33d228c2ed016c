"""The continual methods Wild-Time compares, as modes: SI, A-GEM and SWA.

Each trains a chain through the steps, one step at a time, as the paper's SFT and EWC do, and
continues it on the final step; so under ``eval_stream`` the model of time t has been updated on
step t alone, from the model of time t−1.

* **SI** (Zenke et al., 2017; Wild-Time λ = 0.1, ξ = 0.001): every fit tracks its path integral
  ω; after each step the importance becomes Ω + ω / (Δθ² + ξ), and the next step's loss adds
  c · Σ Ω (θ − θ_{t−1})². Its step-0 model is its own, because Ω needs step 0's path.
* **A-GEM** (Chaudhry et al., 2019; Wild-Time: a memory of 1,000): an episodic memory, a
  reservoir sample of the earlier steps' training images, and every step's gradient projected
  so that it does not point against the gradient on a reference batch from the memory.
* **SWA** (Izmailov et al., 2018, over time): a fine-tuning chain whose end-of-step weights are
  averaged, with the BatchNorm statistics recomputed for the average on the final step's
  training images. Wild-Time's online SWA trains each timestamp on from its running average and
  keeps the last fit's BatchNorm statistics (docs/methods.md and docs/fixes.md say where the two
  differ).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from pydantic import Field
from torch import nn
from torch.optim.swa_utils import AveragedModel, update_bn

from seq2final.core.errors import Seq2FinalError
from seq2final.core.schema import StrictModel
from seq2final.core.seeds import derived_seed
from seq2final.methods.blocks import settings_of, space_of
from seq2final.methods.context import Context
from seq2final.methods.final import continue_chains, fine_tune_chain
from seq2final.methods.historical import fine_tuned_step
from seq2final.methods.modes import (
    FinalOutcome,
    HistoricalState,
    ModelChain,
    StepZero,
    chain_mode,
    final_mode,
    from_step0,
    method,
)
from seq2final.models import set_dropout
from seq2final.training.engine import Engine, accuracy, scale_images
from seq2final.training.loop import clone_model
from seq2final.training.objectives import Task, parameters_of
from seq2final.training.si_agem import GradientProjection, PathTracking
from seq2final.training.tensors import TensorSplit
from seq2final.training.terms import Si


def si_importance(
    omega: dict[str, torch.Tensor],
    start: dict[str, torch.Tensor],
    end: dict[str, torch.Tensor],
    damping: float,
    previous: dict[str, torch.Tensor] | None = None,
) -> dict[str, torch.Tensor]:
    """SI's importance after a step of the sequence: the previous importance plus
    ω / ((θ_end − θ_start)² + ξ) per parameter (ξ: ``damping``, Wild-Time's ε, 0.001)."""
    importance = {}
    for name, value in omega.items():
        change = end[name].to(value) - start[name].to(value)
        added = value / (change.pow(2) + damping)
        importance[name] = added if previous is None else previous[name].to(value) + added
    return importance


def reservoir_indices(offered: Sequence[int], capacity: int, seed: int) -> list[tuple[int, int]]:
    """Which of a stream of items an episodic memory of ``capacity`` keeps (reservoir sampling,
    Vitter's algorithm R, as Wild-Time's A-GEM buffer does): ``offered`` gives the items' count
    per step; the result lists (step, index within the step) of the kept items, in memory order.
    Every item seen so far is in the memory with equal probability, capacity/seen."""
    rng = np.random.default_rng(seed)
    memory: list[tuple[int, int]] = []
    seen = 0
    for step, count in enumerate(offered):
        for index in range(count):
            if len(memory) < capacity:
                memory.append((step, index))
            else:
                slot = int(rng.integers(0, seen + 1))
                if slot < capacity:
                    memory[slot] = (step, index)
            seen += 1
    return memory


class SISettings(StrictModel):
    """SI's settings beside its search space."""

    damping: float = Field(default=0.001, gt=0)


class MemorySettings(StrictModel):
    """A-GEM's episodic memory: how many images it keeps, and the reference batch drawn from it
    for every step (Wild-Time: its mini-batch size, 32 on Yearbook)."""

    memory: int = Field(default=1000, ge=1)
    reference_batch: int = Field(default=32, ge=1)


# SI ------------------------------------------------------------------------------------------


def _check_si(config: Mapping[str, Any], where: str) -> None:
    if "si_c" not in (config.get("space") or {}):
        raise Seq2FinalError(
            f"{where}.space has no 'si_c': SI's weight c of its pull towards the last step; "
            "valid: a space with si_c (Wild-Time's 0.1 as grid: [0.1])"
        )


def _si_start(
    ctx: Context, config: Mapping[str, Any], step0: StepZero | None
) -> dict[str, ModelChain]:
    """SI's own step-0 fit: Ω needs the path of step 0's training."""
    return {
        "main": _sequential_si(ctx, config, "main", ModelChain([], None, [], Si.weight_name()), 0)
    }


@chain_mode(
    "sequential_si",
    "a sequential chain pulled towards the last step by SI's importance (SI)",
    start=_si_start,
    settings=SISettings,
    check=_check_si,
    terms=("si",),
)
def _sequential_si(
    ctx: Context, config: Mapping[str, Any], name: str, chain: ModelChain, t: int
) -> ModelChain:
    damping = settings_of(SISettings, config).damping
    space = space_of(config, "space")
    start = ctx.new_model("step0") if t == 0 else chain.last
    before = parameters_of(start)
    task = Task([ctx.split(t, "train")], ctx.split(t, "valid"), penalties=[Si(chain.anchors)],
                callbacks=[PathTracking()])  # fmt: skip
    model, fit = ctx.tuned(f"step{t}", space, lambda: clone_model(start), task)
    after = parameters_of(model)
    earlier = chain.anchors[-1][1] if chain.anchors else None  # Ω of the steps before t
    importance = si_importance(fit.extras["path_integral"], before, after, damping, earlier)
    importance = {k: value.to(ctx.device) for k, value in importance.items()}
    return ModelChain([*chain.models, model], space.describe(), [(after, importance)],
                      Si.weight_name())  # fmt: skip


# A-GEM ---------------------------------------------------------------------------------------


def episodic_memory(ctx: Context, steps: int, capacity: int) -> TensorSplit:
    """The memory after the training images of steps 0..``steps``−1 streamed through a reservoir
    of ``capacity``: drawn from the run's seed alone, so the historical state and the final job
    of one sequence hold the same memory where their streams overlap."""
    splits = [ctx.split(t, "train") for t in range(steps)]
    kept = reservoir_indices([len(s) for s in splits], capacity,
                             derived_seed(ctx.seed, "episodic_memory"))  # fmt: skip
    return TensorSplit(
        torch.stack([splits[t].x[i] for t, i in kept]),
        torch.stack([splits[t].y[i] for t, i in kept]),
    )


@chain_mode(
    "sequential_agem",
    "a sequential chain whose steps never point against an episodic memory's gradient (A-GEM)",
    start=from_step0,
    uses_step0=True,
    settings=MemorySettings,
)
def _sequential_agem(
    ctx: Context, config: Mapping[str, Any], name: str, chain: ModelChain, t: int
) -> ModelChain:
    settings = settings_of(MemorySettings, config)
    memory = episodic_memory(ctx, t, settings.memory)
    task = Task([ctx.split(t, "train")], ctx.split(t, "valid"),
                callbacks=[GradientProjection(memory, settings.reference_batch)])  # fmt: skip
    return fine_tuned_step(ctx, name, chain, t, space_of(config, "space"), task)


@final_mode(
    "agem",
    "fine-tune on the final step with A-GEM's projection against a memory of steps 0..T−1",
    ("model",),
    settings=MemorySettings,
)
def _agem_final(
    ctx: Context, config: Mapping[str, Any], state: HistoricalState | None
) -> FinalOutcome:
    assert state is not None
    settings = settings_of(MemorySettings, config)
    memory = episodic_memory(ctx, ctx.final_index, settings.memory)
    train, valid = ctx.split(-1, "train"), ctx.split(-1, "valid")

    def fit_chain(name: str, chain: ModelChain) -> nn.Module:
        task = Task(
            [train], valid, callbacks=[GradientProjection(memory, settings.reference_batch)]
        )
        return fine_tune_chain(ctx, config, name, chain, task)

    return continue_chains(ctx, state, fit_chain, None)


# SWA -----------------------------------------------------------------------------------------


@chain_mode(
    "sequential_ft",
    "a chain of models, each fine-tuned from the previous on its step, lr searched (Wild-Time's FT)",
    start=from_step0,
    uses_step0=True,
)
def _sequential_ft(
    ctx: Context, config: Mapping[str, Any], name: str, chain: ModelChain, t: int
) -> ModelChain:
    space = space_of(config, "space")
    task = Task([ctx.split(t, "train")], ctx.split(t, "valid"))
    return fine_tuned_step(ctx, name, chain, t, space, task)


def averaged_model(models: list[nn.Module], data: TensorSplit, engine: Engine) -> nn.Module:
    """The mean of the models' parameters, with BatchNorm statistics recomputed on ``data`` (the
    statistics of averaged weights are not the average of the statistics)."""
    average = AveragedModel(models[0])  # a copy; its first update replaces the weights
    for model in models:
        average.update_parameters(model)
    model = average.module
    device = next(model.parameters()).device
    batches = [
        scale_images(data.x[start : start + engine.batch_size].to(device), engine)
        for start in range(0, len(data), engine.batch_size)
    ]
    rate = getattr(models[-1], "dropout", 0.0)
    set_dropout(model, 0.0)  # the statistics of the features the model predicts from, undropped
    update_bn(batches, model)
    set_dropout(model, rate)  # the rate the last fit trained with, as a continued fit expects
    model.eval()
    return model


@final_mode(
    "swa",
    "fine-tune on the final step, then average the chain's end-of-step weights with it (SWA)",
    ("model",),
)
def _swa_final(
    ctx: Context, config: Mapping[str, Any], state: HistoricalState | None
) -> FinalOutcome:
    assert state is not None
    train, valid = ctx.split(-1, "train"), ctx.split(-1, "valid")

    def fit_chain(name: str, chain: ModelChain) -> nn.Module:
        final = fine_tune_chain(ctx, config, name, chain, Task([train], valid))
        return averaged_model([*chain.models, final], train, ctx.engine)

    def score(model: nn.Module) -> float:  # the average's, not the fine-tuned model's
        return accuracy(model, valid, ctx.engine)

    return continue_chains(ctx, state, fit_chain, None, score)


for _args in (
    ("si", "sequential_si", "ft", "SI", None, "Zenke et al. 2017; Wild-Time's setting, Yao et al. 2022"),
    ("agem", "sequential_agem", "agem", "A-GEM", None, "Chaudhry et al. 2019; Wild-Time's memory of 1,000"),
    ("swa", "sequential_ft", "swa", "SWA", None, "Izmailov et al. 2018; over time, Yao et al. 2022"),
):  # fmt: skip
    method(*_args)
