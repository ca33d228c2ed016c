"""Side modules: geometry per reference §2.7, fresh initialisation, and the ConvNet special case."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

from seq2final.core.errors import Seq2FinalError
from seq2final.models import (
    ARCHITECTURES,
    SIDE_MODULES,
    build_model,
    build_side_module,
    fresh_copy,
    layer_names,
    side_module_kinds,
)

ARCH_KINDS = [
    (name, kind) for name in ARCHITECTURES for kind in side_module_kinds(build_model(name, 2))
]


def _block_inputs(model: nn.Module, images: torch.Tensor) -> dict[str, torch.Tensor]:
    """The input each block sees in eval mode."""
    inputs = {}
    x = images
    for name in layer_names(model)[:-1]:
        inputs[name] = x
        x = getattr(model, name)(x)
    return inputs


@pytest.mark.parametrize(("name", "kind"), ARCH_KINDS)
def test_side_module_output_matches_its_block(name: str, kind: str, images: torch.Tensor) -> None:
    model = build_model(name, 10).eval()
    with torch.no_grad():
        inputs = _block_inputs(model, images)
        for layer in model.geometry:
            side = build_side_module(model, layer, kind).eval()
            assert side(inputs[layer]).shape == getattr(model, layer)(inputs[layer]).shape


def _side_conv_sizes(name: str) -> list[int]:
    model = build_model(name, 10)
    return [
        build_side_module(model, layer, "one_layer").conv.weight.numel() for layer in model.geometry
    ]


def test_one_layer_sizes_for_resnet_4() -> None:
    assert _side_conv_sizes("resnet_4") == [36_864, 73_728, 294_912, 1_179_648]


def test_one_layer_geometry_for_densenet_4_spans_block_and_transition() -> None:
    model = build_model("densenet_4", 10)
    shapes = [
        (side.conv.in_channels, side.conv.out_channels, side.conv.stride[0])
        for side in (build_side_module(model, layer, "one_layer") for layer in model.geometry)
    ]
    assert shapes == [(64, 128, 2), (128, 256, 2), (256, 512, 2), (512, 1024, 1)]
    assert _side_conv_sizes("densenet_4")[-1] == 4_718_592  # larger than the block it shadows


def test_one_layer_is_a_3x3_conv_and_bn_without_relu() -> None:
    side = build_side_module(build_model("resnet_2", 10), "layer2", "one_layer")
    assert [type(m) for m in side.children()] == [nn.Conv2d, nn.BatchNorm2d]
    assert side.conv.kernel_size == (3, 3) and side.conv.padding == (1, 1)
    assert side.conv.bias is None


@pytest.mark.parametrize("name", ["convnet_2", "resnet_2", "densenet_2"])
def test_block_kind_is_a_fresh_trainable_copy(
    name: str, perturb_bn: Callable[..., nn.Module]
) -> None:
    model = perturb_bn(build_model(name, 10))
    model.requires_grad_(False)
    block = model.layer2
    side = build_side_module(model, "layer2", "block")
    assert type(side) is type(block)
    side_state, block_state = side.state_dict(), block.state_dict()
    assert side_state.keys() == block_state.keys()
    assert all(side_state[k].shape == block_state[k].shape for k in side_state)
    assert all(p.requires_grad for p in side.parameters())
    for module in side.modules():
        if isinstance(module, nn.BatchNorm2d):
            assert torch.equal(module.weight, torch.ones_like(module.weight))
            assert torch.equal(module.running_var, torch.ones_like(module.running_var))
        if isinstance(module, nn.Conv2d):
            assert not any(module.weight is p for p in block.parameters())
    first_conv = next(m for m in side.modules() if isinstance(m, nn.Conv2d))
    block_conv = next(m for m in block.modules() if isinstance(m, nn.Conv2d))
    assert not torch.equal(first_conv.weight, block_conv.weight)


def test_convnets_have_only_the_block_kind() -> None:
    model = build_model("convnet_3", 10)
    assert side_module_kinds(model) == ["block"]
    assert side_module_kinds(build_model("resnet_1", 10)) == ["one_layer", "block"]
    with pytest.raises(Seq2FinalError, match="does not exist for convnet_3; valid: block"):
        build_side_module(model, "layer1", "one_layer")


def test_bad_kind_or_layer_is_refused() -> None:
    model = build_model("resnet_1", 10)
    with pytest.raises(Seq2FinalError, match="valid: one_layer, block"):
        build_side_module(model, "layer1", "lora")
    with pytest.raises(Seq2FinalError, match="not 'fc'; valid: layer1"):
        build_side_module(model, "fc", "block")
    with pytest.raises(ValueError, match="already registered"):
        SIDE_MODULES.add("block", SIDE_MODULES["block"])


def test_fresh_copy_refuses_modules_it_cannot_reset() -> None:
    class Scale(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.ones(1))

    with pytest.raises(TypeError, match="Scale owns parameters"):
        fresh_copy(nn.Sequential(nn.Linear(2, 2), Scale()))
