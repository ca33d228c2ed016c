"""Feature Forgetting's gating adapters (Zhang, Dou & Wu, §5.1 and App. B.4) as a model wrapper:
a historical chain (``sft_gated``) and a final mode (``ft_gated``), docs/representations.md.

A gate per unit (per filter of a convolution) multiplies the unit's output by g = 1[ḡ ≥ τ]; the
real-valued ḡ learns through the binarisation by a straight-through estimator, so a closed unit
passes neither its output nor any gradient to the weights that make it, and a closed gate can
reopen. Before every step the gates reset to 1 (ḡ = 1, every unit open) and train alone for the
first ``gate_epochs`` epochs, then with the network. Where the paper puts them: after each
layer's normalisation and non-linearity. In our architectures that is after the stem's
BN + ReLU, after each ConvNet block's BN (the original's ConvNet blocks have no ReLU), after
both convolutions of every residual block (after ``bn1`` + ReLU, and after ``bn2``, before the
shortcut is added: the non-linearity that follows the sum would gate the identity path too), and
after every BN + ReLU of a DenseNet (its layers normalise *before* their convolutions, so there
each gate sits on a convolution's input: ``norm1``'s and ``norm2``'s units of every dense layer,
each transition's). The shortcut's 1×1 convolution and the head are not gated.

The gate weights are ḡ = 1 + s·w with w learnt from 0 (``gate_scale`` s): Adam moves w by about
the learning rate a step whatever its gradient's size, so ḡ moves s times that, and τ = 0.95 is
within reach of a gate-only epoch at the benchmark's rates (the paper trains ḡ directly with SGD
at 0.1).

A gate follows a BatchNorm, directly or through a ReLU, and g ∈ {0, 1}, so g·ReLU(BN(x)) =
ReLU(BN'(x)) with BN's scale and shift multiplied by g: :func:`remove_gates` can fold the gates
into the model exactly and leave a model of the plain architecture, which stores like any other.
A chain's model of step t is the network with its gates *open* (reset), what step t+1 and the
final step start from, so the features a closed gate protected are kept; a final model is the
network with its gates *folded*, as it was trained and validated.

Written on the public API alone (:mod:`seq2final.methods`, :mod:`seq2final.training`), as a plugin
would be (docs/extending.md, "A model trained in phases").
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, TypeVar

import torch
from pydantic import Field
from torch import nn

from seq2final.core.errors import Seq2FinalError
from seq2final.core.schema import StrictModel
from seq2final.methods.blocks import settings_of, space_of
from seq2final.methods.context import Context
from seq2final.methods.final import chain_space, continue_chains, stage_name
from seq2final.methods.modes import (
    FinalOutcome,
    HistoricalState,
    ModelChain,
    chain_mode,
    final_mode,
    from_step0,
    method,
)
from seq2final.models import BasicBlock, ConvBN, DenseBlock, Stem, layer_names
from seq2final.training import ModelWrapper, SearchSpace, Task, clone_model
from seq2final.training.wrappers import Phase

log = logging.getLogger(__name__)

GATES = "gates"
"""Where the gates live: ``model.gates``, so ``gates.<i>.weight`` are the ḡ and no other
parameter's name changes (a chain's EWC or SI anchors still name the network's parameters)."""


class Gate(nn.Module):
    """Binary gates over the channels (dim 1) of its input: g = 1[ḡ ≥ τ] with ḡ = 1 + s·w, w
    learnt (from 0, every gate open) by a straight-through estimator: the forward multiplies by
    g, the backward passes the gradient to ḡ as if g were ḡ."""

    def __init__(self, units: int, tau: float, scale: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(units))
        self.tau, self.scale = tau, scale

    def value(self) -> torch.Tensor:
        """ḡ, the real-valued gate weights (1 at the start: every unit open)."""
        return 1.0 + self.scale * self.weight

    def mask(self) -> torch.Tensor:
        """g: 1 for an open unit, 0 for a closed one."""
        return (self.value() >= self.tau).to(self.weight.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        value = self.value()
        g = (self.mask() + value - value.detach()).to(x.dtype)
        return x * g.view(1, -1, *([1] * (x.dim() - 2)))


class _GateHook:
    """Applies ``gate`` to a module's output (a forward hook) or input (a forward pre-hook) and
    remembers the BatchNorm ``bn`` whose units it gates. An object, not a closure, so a copy of
    the model (``clone_model``) gets hooks that point at the copy's gate and BatchNorm."""

    def __init__(self, gate: Gate, bn: nn.BatchNorm2d) -> None:
        self.gate, self.bn = gate, bn

    def __call__(self, module: nn.Module, *args: Any) -> Any:
        if len(args) == 1:  # a pre-hook: (inputs,)
            return (self.gate(args[0][0]), *args[0][1:])
        return self.gate(args[1])  # a hook: (inputs, output)


def _hooks(model: nn.Module) -> list[tuple[nn.Module, dict[int, Any], int, _GateHook]]:
    """Every gate hook of ``model``: the module, its hook dict, the hook's id and the hook."""
    found = []
    for module in model.modules():
        for hooks in (module._forward_hooks, module._forward_pre_hooks):
            found += [(module, hooks, key, hook) for key, hook in hooks.items()
                      if isinstance(hook, _GateHook)]  # fmt: skip
    return found


def gates_of(model: nn.Module) -> list[Gate]:
    """The gates :func:`add_gates` put in ``model``."""
    return list(getattr(model, GATES, []))


P = TypeVar("P", bound=nn.Module)


def _part(module: nn.Module, name: str, kind: type[P]) -> P:
    """``module``'s child ``name``, of the kind a gate needs there (a module's attributes are
    typed as tensors or modules, so each one a gate reads is checked once here)."""
    part = getattr(module, name)
    if not isinstance(part, kind):
        raise Seq2FinalError(f"{type(module).__name__}.{name} is {type(part).__name__}; "
                             f"gates need a {kind.__name__} there")  # fmt: skip
    return part


def add_gates(model: nn.Module, tau: float, scale: float = 10.0) -> nn.Module:
    """``model`` with an open gate after each layer's normalisation and non-linearity (the
    module docstring says where), in place. Refuses, in one line, a threshold outside (0, 1)
    and an architecture with a block it cannot gate."""
    if not 0.0 < tau < 1.0:
        raise Seq2FinalError(f"gate threshold tau {tau!r}: valid: a number in (0, 1)")
    if not scale > 0:
        raise Seq2FinalError(f"gate_scale {scale!r}: valid: a positive number")
    if GATES in model._modules:
        raise Seq2FinalError("the model already has gates; remove_gates first")
    stem = getattr(model, "conv1", None)
    if not isinstance(stem, Stem):
        raise Seq2FinalError(
            f"gates need a block model with the zoo's stem; got {type(model).__name__}"
        )
    places = [(_part(stem, "relu", nn.Module), _part(stem, "bn", nn.BatchNorm2d), False)]
    for name in layer_names(model)[1:-1]:
        layer = getattr(model, name)
        if isinstance(layer, ConvBN):
            bn = _part(layer, "bn", nn.BatchNorm2d)
            places.append((bn, bn, False))
        elif isinstance(layer, nn.Sequential) and all(isinstance(b, BasicBlock) for b in layer):
            for block in layer:
                bn2 = _part(block, "bn2", nn.BatchNorm2d)
                places += [(_part(block, "conv2", nn.Module), _part(block, "bn1", nn.BatchNorm2d),
                            True), (bn2, bn2, False)]  # fmt: skip
        elif isinstance(getattr(layer, "dense", None), DenseBlock):
            for dense in layer.dense.values():
                places += [(dense.conv1, _part(dense, "norm1", nn.BatchNorm2d), True),
                           (dense.conv2, _part(dense, "norm2", nn.BatchNorm2d), True)]  # fmt: skip
            if "transition" in layer._modules:
                transition = layer.transition
                places.append((transition.conv, _part(transition, "norm", nn.BatchNorm2d), True))
        else:
            raise Seq2FinalError(
                f"gates need every block to be the zoo's ConvNet, ResNet or DenseNet block, which "
                f"{getattr(model, 'arch', type(model).__name__)}'s {name} is not; valid: the "
                "registered convnet_*, resnet_* and densenet_* architectures"
            )
    made = [Gate(bn.num_features, tau, scale) for _, bn, _ in places]
    gates = nn.ModuleList(made)
    for gate, (module, bn, on_input) in zip(made, places, strict=True):
        hook = _GateHook(gate, bn)
        if on_input:
            module.register_forward_pre_hook(hook)
        else:
            module.register_forward_hook(hook)
    model.add_module(GATES, gates.to(next(model.parameters())))
    return model


def remove_gates(model: nn.Module, fold: bool) -> nn.Module:
    """``model`` without its gates, in place: with every unit open (``fold=False``), or with each
    gate's g folded into the scale and shift of the BatchNorm it gates (``fold=True``), which
    computes exactly what the gated model computed."""
    for _, hooks, key, hook in _hooks(model):
        if fold:
            with torch.no_grad():
                g = hook.gate.mask().to(hook.bn.weight)
                hook.bn.weight.mul_(g)
                hook.bn.bias.mul_(g)
        del hooks[key]
    model._modules.pop(GATES, None)
    return model


def closed_share(model: nn.Module) -> float:
    """The share of ``model``'s gated units whose gate is closed."""
    masks = torch.cat([gate.mask().detach().cpu() for gate in gates_of(model)])
    return float(1.0 - masks.mean())


class GateSettings(StrictModel):
    """The adapters' settings beside the mode's search space (App. B.4: τ ∈ {0.95, 0.975}, the
    gates trained alone for the first 1–2 epochs of each sequence step; ``gate_scale`` as the
    module docstring says)."""

    tau: float = Field(default=0.95, gt=0, lt=1)
    gate_epochs: int = Field(default=1, ge=1)
    gate_scale: float = Field(default=10.0, gt=0)


class GatingAdapters(ModelWrapper):
    """The wrapper: open gates added to the model a fit starts from; the gates alone for
    ``gate_epochs`` epochs, the network and its BatchNorm statistics fixed, then every
    parameter."""

    freeze_bn_stats = True

    def __init__(self, settings: GateSettings | None = None) -> None:
        self.settings = settings or GateSettings()

    def configured(self, config: Mapping[str, Any]) -> GatingAdapters:
        return GatingAdapters(settings_of(GateSettings, config))

    def wrap(self, model: nn.Module) -> nn.Module:
        return add_gates(model, self.settings.tau, self.settings.gate_scale)

    def phases(self) -> list[Phase]:
        return [(self.settings.gate_epochs, [f"{GATES}."]), (None, None)]


def gated_fit(
    ctx: Context,
    stage: str,
    adapters: GatingAdapters,
    space: SearchSpace,
    start: nn.Module,
    task: Task,
    fold: bool,
) -> nn.Module:
    """Tune one fit of ``start`` with gates reset to open, trained in the adapters' phases; return
    the selected model without its gates (folded or open, as ``fold`` says). The fit's record
    gains ``closed_gates``, the share of gated units the selected model closed."""
    task = replace(task, callbacks=[*task.callbacks, adapters.callback()])
    gated = ctx.tuned_fit(stage, space, lambda: adapters.wrap(clone_model(start)), task)
    closed = closed_share(gated)
    ctx.fits[-1] = ctx.fits[-1].model_copy(update={"closed_gates": closed})  # in the job's result
    log.info("%s: %.1f %% of gated units closed", stage, 100 * closed)
    return remove_gates(gated, fold)


_ADAPTERS = GatingAdapters()  # the default settings: what the run's checks wrap a probe with


@chain_mode(
    "sft_gated",
    "a fine-tuning chain whose every step trains with gating adapters reset to open "
    "(Feature Forgetting's adapters)",
    start=from_step0,
    uses_step0=True,
    settings=GateSettings,
    wrapper=_ADAPTERS,
)
def _sft_gated(
    ctx: Context, config: Mapping[str, Any], name: str, chain: ModelChain, t: int
) -> ModelChain:
    adapters = GatingAdapters(settings_of(GateSettings, config))
    space = space_of(config, "space")
    task = Task([ctx.split(t, "train")], ctx.split(t, "valid"), penalties=[chain.pull()])
    model = gated_fit(ctx, stage_name(name, f"step{t}"), adapters, space, chain.last, task, False)
    return replace(chain, models=[*chain.models, model])


@final_mode(
    "ft_gated",
    "fine-tune on the final step with gating adapters reset to open, folded into the model",
    ("model",),
    settings=GateSettings,
    wrapper=_ADAPTERS,
)
def _ft_gated(
    ctx: Context, config: Mapping[str, Any], state: HistoricalState | None
) -> FinalOutcome:
    assert state is not None
    adapters = GatingAdapters(settings_of(GateSettings, config))
    train, valid = ctx.split(-1, "train"), ctx.split(-1, "valid")

    def fit_chain(name: str, chain: ModelChain) -> nn.Module:
        task = Task([train], valid, penalties=[chain.pull()])
        space = chain_space(chain, config, "space")
        return gated_fit(ctx, stage_name(name, "final"), adapters, space, chain.last, task, True)

    return continue_chains(ctx, state, fit_chain, None)


method("sft_gated", "sft_gated", "ft_gated", "SFT-gated", citation="Zhang, Dou & Wu; adapters")
method("ft_gated", "erm", "ft_gated", "ERM-FT-gated", citation="Zhang, Dou & Wu; adapters")
