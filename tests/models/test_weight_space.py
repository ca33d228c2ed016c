"""Weight-space paths: interpolation between models and scaling of side modules."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

from seq2final.core.errors import Seq2FinalError
from seq2final.models import (
    ARCHITECTURES,
    JointModel,
    build_model,
    interpolate,
    layer_names,
    scale_side_modules,
    side_module_kinds,
)


def _pair(name: str, perturb_bn: Callable[..., nn.Module]) -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(0)
    start = perturb_bn(build_model(name, 10), seed=1).eval()
    torch.manual_seed(1)
    end = perturb_bn(build_model(name, 10), seed=2).eval()
    return start, end


@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_interpolation_reproduces_both_endpoints_and_moves_between(
    name: str, images: torch.Tensor, perturb_bn: Callable[..., nn.Module]
) -> None:
    start, end = _pair(name, perturb_bn)
    with torch.no_grad():
        at_start, at_end = start(images), end(images)
        assert torch.equal(interpolate(start, end, 0.0)(images), at_start)
        assert torch.equal(interpolate(start, end, 1.0)(images), at_end)
        middle = interpolate(start, end, 0.5)(images)
    assert not torch.allclose(middle, at_start, atol=1e-4)
    assert not torch.allclose(middle, at_end, atol=1e-4)
    assert torch.equal(start(images), at_start)  # the endpoints are left untouched


def test_interpolation_covers_bn_statistics_and_affine(
    perturb_bn: Callable[..., nn.Module],
) -> None:
    start, end = _pair("resnet_2", perturb_bn)
    middle = interpolate(start, end, 0.25)
    a, b, m = start.state_dict(), end.state_dict(), middle.state_dict()
    for key in (
        "layer2.0.downsample.1.running_var",
        "layer2.0.downsample.0.weight",
        "conv1.bn.running_mean",
        "layer1.1.bn2.weight",
        "fc.linear.bias",
    ):
        torch.testing.assert_close(m[key], 0.75 * a[key] + 0.25 * b[key])
    assert torch.equal(m["conv1.bn.num_batches_tracked"], a["conv1.bn.num_batches_tracked"])


def test_interpolation_refuses_mismatched_models_and_weights() -> None:
    with pytest.raises(Seq2FinalError, match="different layers"):
        interpolate(build_model("convnet_1", 10), build_model("convnet_2", 10), 0.5)
    with pytest.raises(Seq2FinalError, match="shapes differ at fc.linear.weight"):
        interpolate(build_model("convnet_1", 10), build_model("convnet_1", 2), 0.5)
    with pytest.raises(Seq2FinalError, match="must lie in \\[0, 1\\]"):
        interpolate(build_model("convnet_1", 10), build_model("convnet_1", 10), 1.5)


SIDE_CASES = [
    (name, kind, stem_head)
    for name in ARCHITECTURES
    for kind in side_module_kinds(build_model(name, 2))
    for stem_head in ("separate", "summed")
]


@pytest.mark.parametrize(("name", "kind", "stem_head"), SIDE_CASES)
def test_side_modules_scaled_to_zero_give_the_base_model_exactly(
    name: str,
    kind: str,
    stem_head: str,
    images: torch.Tensor,
    perturb_bn: Callable[..., nn.Module],
) -> None:
    every_layer = layer_names(build_model(name, 10))
    joint = JointModel(name, 10, 2, [every_layer], "side_tune", kind, stem_head)
    perturb_bn(joint).eval()
    with torch.no_grad():
        base, tuned = joint(images, 0), joint(images, 1)
        assert torch.equal(scale_side_modules(joint, 1, 0.0)(images, 1), base)
        assert torch.equal(scale_side_modules(joint, 1, 1.0)(images, 1), tuned)
        halfway = scale_side_modules(joint, 1, 0.5)(images, 1)
    assert not torch.allclose(halfway, base, atol=1e-4)
    assert not torch.allclose(halfway, tuned, atol=1e-4)
    assert torch.equal(joint(images, 1), tuned)  # the original is left untouched


def test_scaling_a_separate_joint_model_interpolates_between_steps(
    images: torch.Tensor, perturb_bn: Callable[..., nn.Module]
) -> None:
    joint = JointModel("densenet_1", 10, 3, [["layer1", "fc"], ["conv1"]])
    perturb_bn(joint).eval()
    with torch.no_grad():
        assert torch.equal(scale_side_modules(joint, 2, 0.0)(images, 2), joint(images, 1))
        assert torch.equal(scale_side_modules(joint, 2, 1.0)(images, 2), joint(images, 2))
        assert torch.equal(scale_side_modules(joint, 1, 0.0)(images, 1), joint(images, 0))


def test_scaling_refuses_step_zero_and_bad_weights() -> None:
    joint = JointModel("convnet_1", 10, 2, [["fc"]])
    with pytest.raises(Seq2FinalError, match="step must lie in 1..1"):
        scale_side_modules(joint, 0, 0.5)
    with pytest.raises(Seq2FinalError, match="must lie in \\[0, 1\\]"):
        scale_side_modules(joint, 1, -0.5)
