"""Side modules: small trainable modules whose output is added to a frozen block's output.

Side-tuning (ST, SST, JST in the paper) keeps an earlier model's block fixed and learns only an
additive correction at each new time step. The original code offers two kinds:

* ``one_layer``: one 3x3 conv + BN without ReLU, shaped like the block's input and output (for
  DenseNet, the block *and* its transition, so stride 2 except for the last block);
* ``block``: a freshly initialised copy of the block itself.

A ConvNet block is already one conv + BN, so for ConvNets the two kinds coincide; the original
refused to build ``one_layer`` there, and so do we (naming ``block`` as the valid choice) rather than
silently building the same thing twice under two names.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

from torch import nn

from seq2final.core.errors import Seq2FinalError
from seq2final.core.registry import Registry
from seq2final.models.architectures import ARCHITECTURES, BlockModel, ConvBN


def fresh_copy(module: nn.Module) -> nn.Module:
    """A copy of ``module`` re-initialised with PyTorch's defaults, trainable, on the same device.

    Re-running every submodule's own ``reset_parameters`` gives exactly the initialisation a newly
    constructed module would get (BN running statistics included) without knowing its class.
    """
    clone = copy.deepcopy(module)
    for sub in clone.modules():
        reset = getattr(sub, "reset_parameters", None)
        if callable(reset):
            reset()
        elif next(sub.parameters(recurse=False), None) is not None:
            raise TypeError(f"{type(sub).__name__} owns parameters but cannot reset them")
    clone.requires_grad_(True)
    return clone


SideModuleBuilder = Callable[[BlockModel, str], nn.Module]
"""``(model, block name) -> module`` shaped like the block's input and output."""
SIDE_MODULES: Registry[SideModuleBuilder] = Registry("side module kind")


def _one_layer(model: BlockModel, layer: str) -> nn.Module:
    geometry = model.geometry[layer]
    module = ConvBN(geometry.in_channels, geometry.out_channels, geometry.stride)
    parameter = next(model.parameters())
    return module.to(device=parameter.device, dtype=parameter.dtype)


def _block(model: BlockModel, layer: str) -> nn.Module:
    return fresh_copy(getattr(model, layer))


SIDE_MODULES.add("one_layer", _one_layer)
SIDE_MODULES.add("block", _block)


def side_module_kinds(model: BlockModel) -> list[str]:
    """The side-module kinds that exist for this model's architecture (its registry entry)."""
    return list(ARCHITECTURES[model.arch].side_modules)


def build_side_module(model: BlockModel, layer: str, kind: str) -> nn.Module:
    """A new side module of ``kind`` for ``layer`` (``layer1`` ... ``layerK``) of ``model``."""
    build = SIDE_MODULES[kind]
    if kind not in side_module_kinds(model):
        raise Seq2FinalError(
            f"side module kind '{kind}' does not exist for {model.arch}; "
            f"valid: {', '.join(side_module_kinds(model))}"
        )
    if layer not in model.geometry:
        raise Seq2FinalError(
            f"side modules attach to blocks, not '{layer}'; valid: {', '.join(model.geometry)}"
        )
    return build(model, layer)
