"""How a fit updates its weights: a registered optimiser recipe per way, Adam by default.

The original trains every fit with Adam at a constant learning rate, the L2 penalty added to the
loss (docs/methods.md, "The fit loop"); that is the recipe ``adam``, which every task uses unless
it names another (``Task(optimizer=...)``, and the mode that builds it ``optimizer=`` when it
registers, so its YAML spaces may name the recipe's hyper-parameters). A recipe is written as a
loss term is (:mod:`seq2final.training.terms`): a class registered with :func:`optimizer`, whose
``hyperparameters`` pydantic model declares what it reads from the fit's values, with defaults,
ranges and default search-space entries (they join the fit's own, checked before any work).

A recipe with ``takes_closure`` gets the step as PyTorch's closures do
(``optimizer.step(closure)``): the closure zeroes the gradients, recomputes the *whole* loss of
the batches the step drew — objective and every penalty — backward, and runs the callbacks'
``after_backward``. The loop has already run it once (its gradients are there when ``step`` is
called), so sharpness-aware minimisation is an optimiser around any objective: perturb, call the
closure, restore, step (docs/extending.md, "SAM").
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import ClassVar, TypeVar

import torch
from pydantic import BaseModel
from torch import nn

from seq2final.core.errors import Seq2FinalError
from seq2final.core.registry import Registry
from seq2final.training.hyperparameters import HyperParameters, register_declaring
from seq2final.training.terms import NoHyperParameters


class OptimizerRecipe:
    """A way to update a fit's weights; subclass it, override :meth:`build`, and register it
    with :func:`optimizer`. ``takes_closure``: its optimiser's ``step`` is called with the
    closure described above (an fp16 gradient scaler cannot run one, so such a fit refuses
    ``amp: fp16`` in one line)."""

    name: ClassVar[str] = ""
    hyperparameters: ClassVar[type[BaseModel]] = NoHyperParameters
    takes_closure: ClassVar[bool] = False

    def build(
        self, parameters: list[nn.Parameter], hp: HyperParameters, model: nn.Module | None = None
    ) -> torch.optim.Optimizer:
        """A fresh optimiser of ``parameters`` for one fit, with the fit's values ``hp``.

        ``parameters`` are the model's trainable ones, in the order of
        ``model.named_parameters()``; a ``build`` that takes ``model`` is handed the model too,
        so it can group parameters by name (layer-wise learning rates, docs/extending.md)."""
        raise NotImplementedError


OPTIMIZERS: Registry[type[OptimizerRecipe]] = Registry("optimizer")

R = TypeVar("R", bound=type[OptimizerRecipe])


def optimizer(name: str) -> Callable[[R], R]:
    """Register the decorated :class:`OptimizerRecipe` subclass as ``name``; its
    hyper-parameter schema is checked here, when the module (a plugin) is imported."""

    def register(cls: R) -> R:
        register_declaring(OPTIMIZERS, OptimizerRecipe, name, cls)
        return cls

    return register


@optimizer("adam")
class Adam(OptimizerRecipe):
    """The original's optimiser: Adam at the fit's constant learning rate, no ``weight_decay``
    (the L2 penalty is a loss term, docs/methods.md)."""

    def build(
        self, parameters: list[nn.Parameter], hp: HyperParameters, model: nn.Module | None = None
    ) -> torch.optim.Optimizer:
        return torch.optim.Adam(parameters, lr=float(hp.lr))


def build_optimizer(
    recipe: OptimizerRecipe, model: nn.Module, hp: HyperParameters
) -> tuple[list[nn.Parameter], torch.optim.Optimizer]:
    """The fit's trainable parameters (in ``named_parameters`` order) and its optimiser from
    ``recipe``; a recipe whose ``build`` takes ``model`` gets it (one written before it could
    is called as it was)."""
    parameters = [p for p in model.parameters() if p.requires_grad]
    if "model" in inspect.signature(recipe.build).parameters:
        return parameters, recipe.build(parameters, hp, model=model)
    return parameters, recipe.build(parameters, hp)


def resolve_optimizer(recipe: str | OptimizerRecipe) -> OptimizerRecipe:
    """A recipe instance from a registered name (an unknown one lists the valid names), or an
    instance of a registered recipe: its schema was checked when it was registered."""
    if isinstance(recipe, str):
        return OPTIMIZERS[recipe]()
    if not isinstance(recipe, OptimizerRecipe) or OPTIMIZERS.get(recipe.name) is not type(recipe):
        raise Seq2FinalError(
            f"optimizer {recipe!r} is not an instance of a registered recipe; valid: a name of "
            f"{', '.join(OPTIMIZERS)} or an instance of one, registered with @optimizer"
        )
    return recipe
