"""The 12 architectures: exact sizes, structure, naming, freezing, dropout, formats and devices."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from torch import nn

from seq2final.core.errors import Seq2FinalError
from seq2final.core.registry import Registry
from seq2final.models import (
    ARCHITECTURES,
    build_model,
    count_parameters,
    forward_macs,
    layer_names,
    set_trainable,
    squared_weight_norm,
    sum_of_squares,
)
from seq2final.models.architectures import foreach_sum_of_squares

ALL_ARCHS = list(ARCHITECTURES)

# Paper Table 7 (exact, 10 classes) and reference §2.5's "All params" column.
PAPER_COUNTS = {
    "convnet_1": 309_450,
    "convnet_2": 678_090,
    "convnet_3": 1_562_826,
    "convnet_4": 1_599_690,
    "densenet_1": 1_227_594,
    "densenet_2": 1_723_850,
    "densenet_3": 3_027_658,
    "densenet_4": 6_880_458,
    "resnet_1": 7_387_338,
    "resnet_2": 8_198_346,
    "resnet_3": 10_852_554,
    "resnet_4": 11_000_010,
}
ALL_COUNTS = {
    "convnet_1": 310_602,
    "convnet_2": 679_498,
    "convnet_3": 1_564_746,
    "convnet_4": 1_601_738,
    "densenet_1": 1_242_698,
    "densenet_2": 1_744_906,
    "densenet_3": 3_064_458,
    "densenet_4": 6_964_106,
    "resnet_1": 7_425_354,
    "resnet_2": 8_278_602,
    "resnet_3": 11_033_674,
    "resnet_4": 11_181_642,
}
# Reference §2.5's own MAC estimates (millions, rounded).
REFERENCE_MACS_M = {
    "convnet_1": 7.1,
    "convnet_2": 5.9,
    "convnet_3": 5.9,
    "convnet_4": 8.3,
    "densenet_1": 80,
    "densenet_2": 47,
    "densenet_3": 49,
    "densenet_4": 58,
    "resnet_1": 121,
    "resnet_2": 42,
    "resnet_3": 28,
    "resnet_4": 37,
}


def test_the_paper_architectures_are_registered() -> None:
    assert set(PAPER_COUNTS) <= set(ARCHITECTURES)


@pytest.mark.parametrize("name", list(PAPER_COUNTS))
def test_parameter_counts_match_paper_and_reference(name: str) -> None:
    model = build_model(name, num_classes=10)
    assert count_parameters(model) == PAPER_COUNTS[name]
    assert count_parameters(model, "paper") == PAPER_COUNTS[name]
    assert count_parameters(model, "all") == ALL_COUNTS[name]


def test_trainable_count_follows_freezing() -> None:
    model = build_model("convnet_1", 10)
    set_trainable(model, ["fc"])
    assert count_parameters(model, "trainable") == 512 * 10 + 10
    assert count_parameters(model, "all") == ALL_COUNTS["convnet_1"]


def test_unknown_parameter_convention_names_the_valid_ones() -> None:
    with pytest.raises(Seq2FinalError, match="valid: paper, all, trainable"):
        count_parameters(build_model("convnet_1", 10), "vec")


@pytest.mark.parametrize("name", ALL_ARCHS)
def test_output_shapes(name: str, images: torch.Tensor) -> None:
    for num_classes in (2, 10, 20):
        model = build_model(name, num_classes, dropout=0.5)
        assert model(images).shape == (2, num_classes)
        assert model.eval()(images).shape == (2, num_classes)


@pytest.mark.parametrize("name", ALL_ARCHS)
def test_layer_names_are_the_public_vocabulary(name: str) -> None:
    model = build_model(name, 10)
    names = layer_names(model)
    num_blocks = len(names) - 2
    assert num_blocks >= 1
    assert names == ["conv1", *[f"layer{i}" for i in range(1, num_blocks + 1)], "fc"]
    if name in PAPER_COUNTS:
        assert num_blocks == int(name.rsplit("_", 1)[1])
    assert [child for child, _ in model.named_children()] == names
    assert {key.split(".")[0] for key in model.state_dict()} == set(names)
    assert set(model.geometry) == set(names[1:-1])


def _activation_shapes(model: nn.Module, images: torch.Tensor) -> list[tuple[int, ...]]:
    shapes: list[tuple[int, ...]] = []
    handles = [
        getattr(model, name).register_forward_hook(
            lambda _m, _i, out: shapes.append(tuple(out.shape[1:]))
        )
        for name in layer_names(model)
    ]
    model.eval()(images)
    for handle in handles:
        handle.remove()
    return shapes


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("resnet_4", [(64, 8, 8), (64, 8, 8), (128, 4, 4), (256, 2, 2), (512, 1, 1), (10,)]),
        ("convnet_4", [(64, 8, 8), (64, 8, 8), (128, 4, 4), (256, 2, 2), (512, 1, 1), (10,)]),
        ("convnet_1", [(64, 8, 8), (512, 4, 4), (10,)]),
        ("densenet_4", [(64, 8, 8), (128, 4, 4), (256, 2, 2), (512, 1, 1), (1024, 1, 1), (10,)]),
        ("densenet_2", [(64, 8, 8), (128, 4, 4), (640, 4, 4), (10,)]),
        ("resnet_1", [(64, 8, 8), (512, 4, 4), (10,)]),
    ],
)
def test_activation_shapes(name: str, expected: list, images: torch.Tensor) -> None:
    assert _activation_shapes(build_model(name, 10), images) == expected


def test_stem_is_7x7_stride_2_without_bias_then_max_pool() -> None:
    stem = build_model("resnet_1", 10).conv1
    assert (stem.conv.kernel_size, stem.conv.stride, stem.conv.padding) == ((7, 7), (2, 2), (3, 3))
    assert stem.conv.bias is None
    assert isinstance(stem.pool, nn.MaxPool2d)
    assert (stem.pool.kernel_size, stem.pool.stride) == (3, 2)


def test_convnet_blocks_are_affine_without_relu(perturb_bn: Callable[..., nn.Module]) -> None:
    """Conv + BN with no ReLU is affine in eval mode: f(a) + f(b) - f(0) == f(a + b)."""
    model = perturb_bn(build_model("convnet_2", 10)).eval()
    a = torch.randn(2, 64, 8, 8)
    b = torch.randn(2, 64, 8, 8)
    block = model.layer1
    with torch.no_grad():
        combined = block(a) + block(b) - block(torch.zeros_like(a))
        torch.testing.assert_close(combined, block(a + b), atol=1e-4, rtol=1e-4)
    assert not any(isinstance(m, nn.ReLU) for m in block.modules())


def test_resnet_blocks_are_two_basic_blocks_with_downsample_where_needed() -> None:
    from torchvision.models.resnet import BasicBlock

    model = build_model("resnet_4", 10)
    for name, needs_downsample in zip(
        ["layer1", "layer2", "layer3", "layer4"], [False, True, True, True], strict=True
    ):
        first, second = getattr(model, name)
        assert isinstance(first, BasicBlock) and isinstance(second, BasicBlock)
        assert (first.downsample is not None) == needs_downsample
        assert second.downsample is None


def test_densenet_transitions_follow_every_block_but_the_last() -> None:
    from torchvision.models.densenet import _DenseBlock, _Transition

    model = build_model("densenet_4", 10)
    for index, name in enumerate(["layer1", "layer2", "layer3", "layer4"]):
        parts = dict(getattr(model, name).named_children())
        assert isinstance(parts["dense"], _DenseBlock)
        assert ("transition" in parts) == (index < 3)
        if index < 3:
            assert isinstance(parts["transition"], _Transition)
    assert [len(getattr(model, n).dense) for n in ["layer1", "layer2", "layer3", "layer4"]] == [
        6,
        12,
        24,
        16,
    ]
    assert isinstance(model.fc.norm, nn.BatchNorm2d)


@pytest.mark.parametrize("name", ALL_ARCHS)
def test_default_pytorch_initialisation(name: str) -> None:
    """Kaiming-uniform(a=sqrt 5) weights lie within 1/sqrt(fan_in); BN starts at 1 and 0.

    torchvision's parent model classes re-initialise (kaiming-normal on fan-out, which overshoots
    this bound), so this fails if their init leaks in.
    """
    for module in build_model(name, 10).modules():
        if isinstance(module, nn.Conv2d | nn.Linear):
            bound = 1 / math.sqrt(module.weight[0].numel())
            largest = module.weight.abs().max().item()
            assert 0.5 * bound < largest <= bound * (1 + 1e-6)  # float32 rounding
        if isinstance(module, nn.BatchNorm2d):
            assert torch.equal(module.weight, torch.ones_like(module.weight))
            assert torch.equal(module.bias, torch.zeros_like(module.bias))
            assert (module.eps, module.momentum) == (1e-5, 0.1)


@pytest.mark.parametrize("name", ALL_ARCHS)
def test_dropout_follows_every_layer_but_fc(name: str, images: torch.Tensor) -> None:
    """With p = 1 every layer's output but the head's is zeroed in training, leaving the fc bias."""
    model = build_model(name, 10, dropout=1.0)
    with torch.no_grad():
        logits = model.train()(images)
        assert torch.equal(logits, model.fc.linear.bias.expand(2, -1))
        assert not torch.equal(model.eval()(images), logits)


@pytest.mark.parametrize("name", ALL_ARCHS)
def test_channels_last_and_larger_inputs(name: str, images: torch.Tensor) -> None:
    model = build_model(name, 10).eval()
    with torch.no_grad():
        expected = model(images)
        fast = model.to(memory_format=torch.channels_last)
        got = fast(images.contiguous(memory_format=torch.channels_last))
        torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
        for size in (40, 64):
            assert model(torch.rand(2, 3, size, size)).shape == (2, 10)


@pytest.mark.parametrize("name", ALL_ARCHS)
def test_freezing_by_name_keeps_frozen_parameters_bitwise(name: str, images: torch.Tensor) -> None:
    model = build_model(name, 10)
    trainable = ["fc", layer_names(model)[-2]]
    set_trainable(model, trainable)
    before = {key: value.clone() for key, value in model.named_parameters()}
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=0.1)
    loss = nn.functional.cross_entropy(model(images), torch.tensor([0, 1]))
    loss.backward()
    optimizer.step()
    for key, value in model.named_parameters():
        if key.split(".")[0] in trainable:
            assert value.requires_grad
        else:
            assert not value.requires_grad
            assert torch.equal(value, before[key]), key
    assert not torch.equal(model.fc.linear.weight, before["fc.linear.weight"])


def test_set_trainable_refuses_unknown_layers() -> None:
    with pytest.raises(Seq2FinalError, match="layer9.*valid: conv1, layer1, fc"):
        set_trainable(build_model("convnet_1", 10), ["layer9"])


def test_registry_refuses_duplicates() -> None:
    size = len(ARCHITECTURES)
    with pytest.raises(ValueError, match="already registered"):
        ARCHITECTURES.add("convnet_1", lambda num_classes, dropout: None)
    assert len(ARCHITECTURES) == size
    registry: Registry[int] = Registry("thing")
    registry.register("a")(1)
    with pytest.raises(ValueError, match="thing 'a' is already registered"):
        registry.register("a")(2)
    assert registry["a"] == 1


def test_unknown_architecture_lists_the_valid_names() -> None:
    with pytest.raises(Seq2FinalError) as info:
        build_model("vgg_16", 10)
    message = str(info.value)
    assert "vgg_16" in message
    assert all(name in message for name in ARCHITECTURES)
    assert "\n" not in message


@pytest.mark.parametrize(
    ("num_classes", "dropout"), [(0, 0.0), (2.5, 0.0), (True, 0.0), (10, -0.1), (10, 1.5)]
)
def test_build_model_refuses_bad_settings(num_classes: object, dropout: float) -> None:
    with pytest.raises(Seq2FinalError):
        build_model("convnet_1", num_classes, dropout)  # type: ignore[arg-type]


def test_forward_macs_of_convnet_1_by_hand() -> None:
    stem = 16 * 16 * 7 * 7 * 3 * 64  # 7x7 conv on a 16x16 output map
    block = 4 * 4 * 3 * 3 * 64 * 512  # stride-2 3x3 conv on the 8x8 pooled map
    head = 512 * 10
    assert forward_macs(build_model("convnet_1", 10)) == stem + block + head == 7_132_160


@pytest.mark.parametrize("name", list(REFERENCE_MACS_M))
def test_forward_macs_match_reference_estimates(name: str) -> None:
    macs = forward_macs(build_model(name, 10)) / 1e6
    assert macs == pytest.approx(REFERENCE_MACS_M[name], rel=0.02)


def test_squared_weight_norm_covers_conv_and_linear_only() -> None:
    model = build_model("convnet_1", 10)
    expected = sum(
        p.pow(2).sum()
        for p in (model.conv1.conv.weight, model.layer1.conv.weight, *model.fc.linear.parameters())
    )
    torch.testing.assert_close(squared_weight_norm(model), expected)
    with torch.no_grad():
        model.layer1.bn.weight.fill_(3.0)
    torch.testing.assert_close(squared_weight_norm(model), expected)


def _penalty_inputs() -> tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    shapes = [(8, 3, 3, 3), (8,), (10, 8)]
    tensors = [torch.randn(s, generator=generator, dtype=torch.float64) for s in shapes]
    minus = [torch.randn(s, generator=generator, dtype=torch.float64) for s in shapes]
    weights = [torch.rand(s, generator=generator, dtype=torch.float64) for s in shapes]
    weights[1][:3] = 0.0  # an unimportant parameter: its term and gradient vanish
    return [t.requires_grad_() for t in tensors], minus, weights


@pytest.mark.parametrize("with_minus", [False, True])
@pytest.mark.parametrize("with_weights", [False, True])
def test_foreach_sum_of_squares_equals_the_per_tensor_sums_and_their_gradients(
    with_minus: bool, with_weights: bool
) -> None:
    tensors, minus, weights = _penalty_inputs()
    minus = minus if with_minus else None
    weights = weights if with_weights else None
    expected = sum(
        (
            (t if minus is None else t - minus[i]).pow(2) * (1 if weights is None else weights[i])
        ).sum()
        for i, t in enumerate(tensors)
    )
    expected_grads = torch.autograd.grad(expected, tensors)
    got = foreach_sum_of_squares(tensors, minus, weights)  # the CUDA path, run here on the CPU
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=0)
    for grad, want in zip(torch.autograd.grad(got, tensors), expected_grads, strict=True):
        torch.testing.assert_close(grad, want, rtol=1e-12, atol=0)
    torch.testing.assert_close(
        sum_of_squares(tensors, minus, weights), expected, rtol=1e-12, atol=0
    )


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_sum_of_squares_on_cuda_agrees_with_the_cpu() -> None:
    tensors, minus, weights = _penalty_inputs()
    on_gpu = [[t.detach().cuda() for t in ts] for ts in (tensors, minus, weights)]
    torch.testing.assert_close(
        sum_of_squares(*on_gpu).cpu(), sum_of_squares(tensors, minus, weights), rtol=1e-10, atol=0
    )


def test_sum_of_squares_under_vmap_gives_each_models_own_sum() -> None:
    tensors, minus, weights = _penalty_inputs()
    stacked = [torch.stack([t.detach(), 2 * t.detach()]) for t in tensors]
    got = torch.vmap(lambda *ts: sum_of_squares(ts, minus, weights))(*stacked)
    one = sum_of_squares([t.detach() for t in tensors], minus, weights)
    two = sum_of_squares([2 * t.detach() for t in tensors], minus, weights)
    torch.testing.assert_close(got, torch.stack([one, two]))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name", ALL_ARCHS)
def test_cuda_matches_cpu(name: str, images: torch.Tensor) -> None:
    model = build_model(name, 10).eval()
    with torch.no_grad():
        expected = model(images)
        got = model.cuda()(images.cuda()).cpu()
    torch.testing.assert_close(got, expected, atol=1e-3, rtol=1e-3)
