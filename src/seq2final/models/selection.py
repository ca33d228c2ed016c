"""Which parameters a fit trains, chosen by a predicate given the model.

A layer name (``fc``, ``layer3``) is the coarse choice every built-in method makes
(:func:`~seq2final.models.architectures.set_trainable`); methods such as BitFit choose across
layers: every bias, every parameter of a module type, the parameters of a named module and
below it. A :class:`ParameterChoice` is such a predicate over ``(qualified name, parameter,
owning module)``, evaluated on the model the fit trains, so it needs no parameter names read
ahead of time; choices combine with ``|``, ``&`` and ``~``. A module path matches whole path
parts (``fc`` is ``fc`` and ``fc.linear``, never ``fc2``), unlike a name prefix.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from torch import nn

from seq2final.core.errors import Seq2FinalError
from seq2final.models.architectures import set_trainable

ParameterTest = Callable[[str, nn.Parameter, nn.Module], bool]
"""``(qualified parameter name, parameter, the module that owns it directly)`` → chosen."""


@dataclass(frozen=True)
class ParameterChoice:
    """A predicate choosing parameters of a model; ``description`` names it in messages."""

    test: ParameterTest
    description: str

    def chosen(self, model: nn.Module) -> list[str]:
        """The qualified names of ``model``'s parameters the predicate chooses, in model order."""
        return [name for name, parameter, owner in owned_parameters(model)
                if self.test(name, parameter, owner)]  # fmt: skip

    def __or__(self, other: ParameterChoice) -> ParameterChoice:
        return ParameterChoice(
            lambda *a: self.test(*a) or other.test(*a), f"{self.description} or {other.description}"
        )

    def __and__(self, other: ParameterChoice) -> ParameterChoice:
        return ParameterChoice(
            lambda *a: self.test(*a) and other.test(*a),
            f"{self.description} and {other.description}",
        )

    def __invert__(self) -> ParameterChoice:
        return ParameterChoice(lambda *a: not self.test(*a), f"not ({self.description})")


def owned_parameters(model: nn.Module) -> list[tuple[str, nn.Parameter, nn.Module]]:
    """Every parameter of ``model`` with its qualified name and the module that owns it."""
    return [
        (f"{path}.{name}" if path else name, parameter, module)
        for path, module in model.named_modules()
        for name, parameter in module.named_parameters(recurse=False)
    ]


def biases() -> ParameterChoice:
    """Every bias (BitFit's choice, Ben Zaken et al. 2022), of any layer type."""
    return ParameterChoice(lambda name, p, owner: name.rsplit(".", 1)[-1] == "bias", "biases")


def in_modules(*paths: str) -> ParameterChoice:
    """The parameters of the modules at ``paths`` and of every module below them."""

    def test(name: str, parameter: nn.Parameter, owner: nn.Module) -> bool:
        return any(name.startswith(f"{path}.") for path in paths)

    return ParameterChoice(test, f"modules {', '.join(paths)}")


def of_type(*types: type[nn.Module]) -> ParameterChoice:
    """The parameters owned directly by a module of one of ``types`` (``nn.BatchNorm2d``...)."""
    names = ", ".join(t.__name__ for t in types)
    return ParameterChoice(lambda name, p, owner: isinstance(owner, types), f"{names} modules")


def choose_trainable(model: nn.Module, choice: Sequence[str] | ParameterChoice) -> None:
    """Train exactly what ``choice`` says and freeze the rest: layer names
    (:func:`~seq2final.models.architectures.set_trainable`) or a predicate, which must choose
    something (one line naming it and the model's first parameters otherwise)."""
    if not isinstance(choice, ParameterChoice):
        set_trainable(model, choice)
        return
    chosen = set(choice.chosen(model))
    if not chosen:
        names = [name for name, _ in model.named_parameters()][:4]
        raise Seq2FinalError(
            f"trainable parameters '{choice.description}' choose none of the model's; valid: a "
            f"choice matching parameters such as {', '.join(names)}"
        )
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(name in chosen)
