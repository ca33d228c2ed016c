"""Output transforms: a final model whose logits pass through a registered module of their own.

A final mode returns a model; most return an architecture's model as trained. Some change what
the model outputs without changing the network: post-hoc temperature scaling (Guo et al., 2017)
divides the logits by a temperature fitted on validation, which moves the NLL and the calibration
error but no prediction. Such a mode returns ``TransformedModel(model, transform)``: the job scores
it (accuracy, NLL, ECE on its transformed logits), the result store keeps it as that pair (the
architecture's layout, the transform's registered name, both sets of weights) and MLflow serves
it so. The transform is a registered class (:func:`output_transform`, a plugin registers its own)
built with no arguments, all its state in its parameters and buffers, so a stored model is rebuilt
from its payload like any other (:mod:`seq2final.models.storage`). The weight-space figures
(interpolation, projection, SVCCA) read the architecture's model inside (:func:`network_of`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from seq2final.core.registry import Registry

OUTPUT_TRANSFORMS: Registry[type[nn.Module]] = Registry("output transform")


def output_transform(name: str) -> Callable[[type[nn.Module]], type[nn.Module]]:
    """Register a module class, built with no arguments, that maps a batch of logits to logits
    (``transform(logits)``) under ``name``: what a stored :class:`TransformedModel` names."""
    return OUTPUT_TRANSFORMS.register(name)


@output_transform("temperature")
class TemperatureScaling(nn.Module):
    """Logits divided by one temperature T (Guo et al., 2017), 1 until fitted: T > 1 softens the
    probabilities, and no argmax changes."""

    def __init__(self) -> None:
        super().__init__()
        self.temperature = nn.Parameter(torch.ones(()))

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        return logits / self.temperature


class TransformedModel(nn.Module):
    """An architecture's model (``network``) whose logits pass through ``transform``, an instance
    of a registered output transform (its name is looked up from its class)."""

    def __init__(self, network: nn.Module, transform: nn.Module) -> None:
        super().__init__()
        names = [n for n in OUTPUT_TRANSFORMS if OUTPUT_TRANSFORMS[n] is type(transform)]
        if not names:
            OUTPUT_TRANSFORMS.validate(type(transform).__name__)  # one line: the valid names
        self.transform_name = names[0]
        self.network = network
        self.transform = transform

    @property
    def dropout(self) -> float | torch.Tensor:
        """The network's dropout rate: a fit of the pair sets the network's (``set_dropout``)."""
        rate: float | torch.Tensor = getattr(self.network, "dropout")  # noqa: B009  (an attribute)
        return rate

    @dropout.setter
    def dropout(self, rate: float | torch.Tensor) -> None:
        setattr(self.network, "dropout", rate)  # noqa: B010  (as set_dropout does)

    def forward(self, x: torch.Tensor, *step: int) -> torch.Tensor:
        """The network's logits (a joint model's at time ``step``), transformed."""
        return self.transform(self.network(x, *step))  # type: ignore[no-any-return]  # Module.__call__ is Any


def network_of(model: nn.Module) -> nn.Module:
    """The architecture's model a final model is made of: itself, or a transformed model's."""
    return model.network if isinstance(model, TransformedModel) else model
