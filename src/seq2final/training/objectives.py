"""What one fit trains (:class:`Task`) and the loss it minimises (:func:`objective_loss`).

Every method trains through the same loop (:mod:`seq2final.training.loop`); what differs is its
task: the data, the loss terms (:mod:`seq2final.training.terms`: an objective that combines the
per-domain losses, and penalties) and the callbacks that act at named points of the loop
(:mod:`seq2final.training.callbacks`). The EWC Fisher and anchors are computed here, between fits.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import InitVar, dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from pydantic import BaseModel
from torch import nn

from seq2final.core.errors import Seq2FinalError
from seq2final.models import ParameterChoice
from seq2final.training.callbacks import FitCallback
from seq2final.training.engine import Engine, run_model, run_model_with_features, scale_images
from seq2final.training.hyperparameters import HyperParameters, complete, declared
from seq2final.training.optimizers import OPTIMIZERS, OptimizerRecipe, resolve_optimizer
from seq2final.training.tensors import TensorSplit
from seq2final.training.terms import (
    L2,
    LOSS_TERMS,
    Batch,
    LossInputs,
    LossTerm,
    at_least_float32,
    is_objective,
    resolve,
    schemas,
)


@dataclass
class Task:
    """What one fit trains: data, loss terms and callbacks, and what is not searched.

    ``objective`` is the term that combines the domains' losses (a registered name or an
    instance); ``penalties`` are the penalty terms beyond the L2 term every fit has (EWC's pull, the
    joint models' adjacency term, a user's term); ``callbacks`` act at named points of the loop
    (:mod:`seq2final.training.callbacks`: A-GEM's projection, SI's path integral, batch mixing).
    ``steps`` gives, per training domain, the time index a joint model runs it at (``None`` for
    a plain model); ``valid_step`` likewise for the validation set. ``step_weights`` are the
    joint loss's c_t. ``trainable`` is what the fit trains (all by default): layer names, or a
    :class:`~seq2final.models.ParameterChoice` evaluated on the model (``biases() |
    in_modules("fc")``). ``optimizer``: how the fit updates the weights, a registered
    :class:`~seq2final.training.optimizers.OptimizerRecipe` (name or instance), Adam by default.
    """

    domains: list[TensorSplit]
    valid: TensorSplit
    objective: str | LossTerm = "erm"
    steps: list[int | None] | None = None
    valid_step: int | None = None
    step_weights: list[float] | None = None
    trainable: Sequence[str] | ParameterChoice | None = None
    penalties: list[LossTerm] = field(default_factory=list)
    callbacks: list[FitCallback] = field(default_factory=list)
    optimizer: str | OptimizerRecipe = "adam"
    terms: InitVar[list[LossTerm] | None] = None
    all_penalties: list[LossTerm] = field(init=False, repr=False)
    """The L2 term every fit has, then the task's own, in the order they are added (made once
    here, not on every training step)."""
    uses_features: bool = field(init=False, repr=False)
    """Whether a term of the fit reads features (:attr:`LossTerm.uses_features`)."""

    def __post_init__(self, terms: list[LossTerm] | None) -> None:
        if terms is not None:  # its name in 0.1.0, where "terms" were a task's penalties
            warnings.warn(
                "Task(terms=...) is now Task(penalties=...): 'terms' names every loss term, "
                "objectives too (a mode's terms=)",
                DeprecationWarning,
                stacklevel=3,
            )
            self.penalties = [*self.penalties, *terms]
        self.objective = resolve(self.objective)
        self.optimizer = resolve_optimizer(self.optimizer)
        self.all_penalties = [L2(), *self.penalties]
        self.uses_features = any(term.uses_features for term in self.loss_terms)
        if not is_objective(type(self.objective)):
            raise Seq2FinalError(
                f"loss term '{self.objective.name}' is a penalty, not an objective; valid "
                f"objectives: {', '.join(n for n, t in LOSS_TERMS.items() if is_objective(t))}"
            )
        if not self.domains or any(len(d) == 0 for d in self.domains) or len(self.valid) == 0:
            raise Seq2FinalError("a fit needs non-empty training domains and validation set")
        declared(self._schemas())  # a hyper-parameter two parts declare stops here

    @property
    def loss_terms(self) -> list[LossTerm]:
        """Every term of the fit's loss: the objective, then the penalties."""
        assert isinstance(self.objective, LossTerm)  # a name is resolved on construction
        return [self.objective, *self.all_penalties]

    @property
    def optimizer_recipe(self) -> OptimizerRecipe:
        """The fit's optimiser recipe (a name is resolved on construction)."""
        assert isinstance(self.optimizer, OptimizerRecipe)
        return self.optimizer

    def _schemas(self) -> list[tuple[str, type[BaseModel]]]:
        recipe = self.optimizer_recipe
        return [*schemas(self.loss_terms), (f"optimizer '{recipe.name}'", recipe.hyperparameters)]

    def hyperparameters(self, values: Mapping[str, Any]) -> HyperParameters:
        """Its name in 0.1.0: :meth:`checked_hyperparameters` (``hyperparameters`` names values
        and a term's schema of them, not the check)."""
        warnings.warn(
            "Task.hyperparameters(values) is now Task.checked_hyperparameters(values)",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.checked_hyperparameters(values)

    def checked_hyperparameters(self, values: Mapping[str, Any]) -> HyperParameters:
        """``values`` checked against what the fit's loss terms declare, every missing
        one at its default."""
        return complete(values, self._schemas())


def mode_schemas(
    terms: Sequence[str], optimizer: str = "adam"
) -> list[tuple[str, type[BaseModel]]]:
    """The schemas a mode's spaces are checked against: the L2 term every fit has, the
    registered terms the mode names and its optimiser's (an unknown name lists the valid ones)."""
    recipe = OPTIMIZERS[optimizer]
    return [
        *schemas([L2, *(LOSS_TERMS[name] for name in terms)]),
        (f"optimizer '{optimizer}'", recipe.hyperparameters),
    ]


def objective_loss(
    model: nn.Module,
    batches: list[Batch],
    task: Task,
    hp: HyperParameters,
    generator: torch.Generator | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """The task's loss: its objective over the domains' losses plus its penalties; also the summed
    CE and correct count (detached tensors on the device, read once per epoch by the loop, never
    per batch) and the sample count."""
    count = 0
    device = batches[0].x.device
    ce_sum = torch.zeros((), dtype=torch.float64, device=device)  # double, as a Python sum was
    correct = torch.zeros((), dtype=torch.int64, device=device)
    inputs = LossInputs(model, batches, generator)
    objective = task.objective
    assert isinstance(objective, LossTerm)  # resolved from its name when the task was made
    for index, batch in enumerate(batches):
        if task.uses_features:
            features, logits = run_model_with_features(model, batch.x, batch.step)
            inputs.features.append(features)
        else:
            logits = run_model(model, batch.x, batch.step)
        inputs.logits.append(logits)
        losses = F.cross_entropy(at_least_float32(logits), batch.y, reduction="none")  # once
        if batch.mixed_y is not None:  # mixed images: each label's loss by its share of the image
            assert batch.mix is not None  # a mixed batch carries both
            other = F.cross_entropy(at_least_float32(logits), batch.mixed_y, reduction="none")
            losses = batch.mix * losses + (1 - batch.mix) * other
        inputs.losses.append(losses)
        ce = (losses if batch.weight is None else losses * batch.weight).mean()
        ce = objective.domain_loss(inputs, index, ce, hp)
        inputs.domain_losses.append(ce * batch.loss_weight)
        with torch.no_grad():
            ce_sum = ce_sum + losses.detach().sum()
            correct = correct + (logits.argmax(1) == batch.y).sum()
            count += len(batch.y)
    data_loss = objective.combine(inputs, hp)
    penalties = torch.zeros((), device=device)
    for term in task.all_penalties:
        value = term.penalty(inputs, hp)
        if value is not None:
            penalties = penalties + value
    return data_loss + penalties, ce_sum, correct, count


def fisher_information(
    model: nn.Module, data: TensorSplit, engine: Engine
) -> dict[str, torch.Tensor]:
    """The original's batch-level empirical Fisher (docs/methods.md, EWC), in eval mode.

    For each batch the gradient of the *summed* cross entropy is squared and accumulated, and the
    total is divided by the number of samples: F = (1/N) Σ_batches (∇ Σ_{i∈batch} ℓ_i)².
    Every trainable parameter gets an entry.
    """
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    fisher = {name: torch.zeros_like(p) for name, p in named}
    try:
        for start in range(0, len(data), engine.batch_size):
            x = scale_images(data.x[start : start + engine.batch_size].to(device), engine)
            y = data.y[start : start + engine.batch_size].to(device)
            model.zero_grad(set_to_none=True)
            F.cross_entropy(model(x).float(), y, reduction="sum").backward()
            for name, parameter in named:
                if parameter.grad is not None:
                    fisher[name] += parameter.grad.detach().pow(2)
        model.zero_grad(set_to_none=True)
    finally:
        model.train(was_training)
    return {name: value / len(data) for name, value in fisher.items()}


def parameters_of(model: nn.Module) -> dict[str, torch.Tensor]:
    """A detached copy of the model's parameters: an EWC anchor's θ_k."""
    return {name: p.detach().clone() for name, p in model.named_parameters()}
