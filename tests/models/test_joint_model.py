"""The joint model: module paths, separate and side-tune forward, loading/freezing, norms."""

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
    layer_names,
    squared_weight_norm,
)

ALL_LAYERS_2 = ["conv1", "layer1", "layer2", "fc"]


@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_one_step_joint_model_equals_the_plain_model(
    name: str, images: torch.Tensor, perturb_bn: Callable[..., nn.Module]
) -> None:
    plain = perturb_bn(build_model(name, 10, dropout=0.5))
    joint = JointModel(name, 10, 1, [], dropout=0.5)
    joint.load_previous(plain, freeze=False)
    with torch.no_grad():
        torch.manual_seed(1)
        expected = plain(images)
        torch.manual_seed(1)
        assert torch.equal(joint(images, 0), expected)
        assert torch.equal(joint.eval()(images, 0), plain.eval()(images))
    assert joint.layer_names == plain.layer_names
    assert all(p.requires_grad for p in joint.parameters())


def test_module_path_counts_new_modules() -> None:
    joint = JointModel("convnet_2", 10, 4, [["layer1", "fc"], [], ["layer1"]])
    assert joint.module_path == [
        {"conv1": 0, "layer1": 0, "layer2": 0, "fc": 0},
        {"conv1": 0, "layer1": 1, "layer2": 0, "fc": 1},
        {"conv1": 0, "layer1": 1, "layer2": 0, "fc": 1},
        {"conv1": 0, "layer1": 2, "layer2": 0, "fc": 1},
    ]
    assert [len(joint.layers[n]) for n in layer_names(joint)] == [1, 3, 1, 2]


def test_separate_mode_uses_the_step_module_alone(images: torch.Tensor) -> None:
    joint = JointModel("resnet_2", 10, 2, [ALL_LAYERS_2]).eval()
    step1 = build_model("resnet_2", 10).eval()
    for name in ALL_LAYERS_2:
        getattr(step1, name).load_state_dict(joint.layers[name][1].state_dict())
    with torch.no_grad():
        assert torch.equal(joint(images, 1), step1(images))
        before = joint(images, 0)
        for p in joint.layers["layer1"][1].parameters():
            p.add_(1.0)
        assert torch.equal(joint(images, 0), before)
        assert not torch.equal(joint(images, 1), step1(images))


@pytest.mark.parametrize(
    ("name", "kind", "stem_head"),
    [
        ("convnet_2", "block", "separate"),
        ("resnet_2", "one_layer", "separate"),
        ("densenet_2", "one_layer", "summed"),
        ("resnet_1", "block", "summed"),
    ],
)
def test_side_tune_sums_base_and_side_modules(
    name: str, kind: str, stem_head: str, images: torch.Tensor
) -> None:
    joint = JointModel(
        name, 10, 2, [layer_names(build_model(name, 10))], "side_tune", kind, stem_head
    ).eval()
    x = images
    with torch.no_grad():
        for layer in joint.layer_names:
            base, new = joint.layers[layer]
            if layer in ("conv1", "fc") and stem_head == "separate":
                assert not joint.is_summed(layer)
                x = new(x)
            else:
                assert joint.is_summed(layer)
                x = base(x) + new(x)
        torch.testing.assert_close(joint(images, 1), x, atol=1e-5, rtol=1e-5)


def test_one_layer_side_modules_in_the_joint_model_are_conv_bn() -> None:
    joint = JointModel("resnet_1", 10, 2, [["layer1"]], "side_tune", "one_layer")
    side = joint.layers["layer1"][1]
    assert [type(m) for m in side.children()] == [nn.Conv2d, nn.BatchNorm2d]


def test_loading_freezes_earlier_modules_and_keeps_new_ones_fresh(
    images: torch.Tensor, perturb_bn: Callable[..., nn.Module]
) -> None:
    plain = perturb_bn(build_model("resnet_2", 10)).eval()
    sst1 = JointModel("resnet_2", 10, 2, [ALL_LAYERS_2], "side_tune", "one_layer")
    sst1.load_previous(plain)
    sst1.eval()
    with torch.no_grad():
        assert torch.equal(sst1(images, 0), plain(images))
    for name in ALL_LAYERS_2:
        assert all(not p.requires_grad for p in sst1.layers[name][0].parameters())
        assert all(p.requires_grad for p in sst1.layers[name][1].parameters())
    assert not torch.equal(sst1.layers["conv1"][1].conv.weight, plain.conv1.conv.weight)
    assert not torch.equal(sst1.layers["fc"][1].linear.weight, plain.fc.linear.weight)

    sst2 = JointModel("resnet_2", 10, 3, [ALL_LAYERS_2, ALL_LAYERS_2], "side_tune", "one_layer")
    sst2.load_previous(sst1)
    sst2.eval()
    with torch.no_grad():
        for t in (0, 1):
            assert torch.equal(sst2(images, t), sst1(images, t))
    for name in ALL_LAYERS_2:
        assert [all(p.requires_grad for p in m.parameters()) for m in sst2.layers[name]] == [
            False,
            False,
            True,
        ]


def test_an_optimiser_step_changes_only_the_new_modules(images: torch.Tensor) -> None:
    joint = JointModel("convnet_1", 10, 2, [["conv1", "layer1", "fc"]], "side_tune")
    joint.load_previous(build_model("convnet_1", 10))
    before = {k: v.clone() for k, v in joint.named_parameters()}
    optimizer = torch.optim.Adam([p for p in joint.parameters() if p.requires_grad], lr=0.1)
    loss = nn.functional.cross_entropy(joint(images, 1), torch.tensor([0, 1]))
    (loss + joint.adjacency_norm() + joint.param_norm()).backward()
    optimizer.step()
    for key, value in joint.named_parameters():
        changed = not torch.equal(value, before[key])
        assert changed == (key.split(".")[2] == "1"), key


def test_load_previous_refuses_mismatches() -> None:
    joint = JointModel("resnet_1", 10, 2, [["layer1"]], "side_tune", "one_layer")
    with pytest.raises(Seq2FinalError, match="cannot load a convnet_1 model into a resnet_1"):
        joint.load_previous(build_model("convnet_1", 10))
    with pytest.raises(Seq2FinalError, match="not Sequential"):
        joint.load_previous(build_model("resnet_1", 10).layer1)  # type: ignore[arg-type]
    with pytest.raises(Seq2FinalError, match="cannot load fc\\[0\\]"):
        joint.load_previous(build_model("resnet_1", 20))
    longer = JointModel("resnet_1", 10, 3, [["layer1"], ["layer1"]], "side_tune", "one_layer")
    with pytest.raises(Seq2FinalError, match="more than this one's 2"):
        joint.load_previous(longer)
    separate = JointModel("resnet_1", 10, 2, [["layer1"]])
    with pytest.raises(Seq2FinalError, match="cannot load a 'separate'"):
        joint.load_previous(separate)
    other_spec = JointModel("resnet_1", 10, 2, [["fc"]], "side_tune", "one_layer")
    with pytest.raises(Seq2FinalError, match="1 module\\(s\\) for layer1; this model uses 2"):
        joint.load_previous(other_spec)


def _copy_step_modules(joint: JointModel) -> None:
    """Make every module new at step 1 a copy of its step-0 predecessor (same shapes only)."""
    for name in joint.layer_names:
        modules = joint.layers[name]
        if len(modules) == 2 and not joint.is_summed(name):
            modules[1].load_state_dict(modules[0].state_dict())


def test_adjacency_norm_separate_mode_by_hand(perturb_bn: Callable[..., nn.Module]) -> None:
    joint = JointModel("convnet_2", 10, 2, [ALL_LAYERS_2])
    perturb_bn(joint)
    _copy_step_modules(joint)
    assert joint.adjacency_norm().item() == 0.0

    generator = torch.Generator().manual_seed(3)
    new_block = joint.layers["layer2"][1]
    deltas = {
        "conv": 0.01 * torch.randn(new_block.conv.weight.shape, generator=generator),
        "bn": 0.1 * torch.randn(new_block.bn.weight.shape, generator=generator),
        "bias": 0.1 * torch.randn(joint.layers["fc"][1].linear.bias.shape, generator=generator),
    }
    with torch.no_grad():
        new_block.conv.weight.add_(deltas["conv"])
        new_block.bn.weight.add_(deltas["bn"])  # BN affine counts in separate mode
        new_block.bn.running_mean.add_(1.0)  # running statistics do not
        joint.layers["fc"][1].linear.bias.add_(deltas["bias"])
    expected = sum(d.pow(2).sum() for d in deltas.values())
    torch.testing.assert_close(joint.adjacency_norm(), expected, rtol=1e-4, atol=1e-7)


def test_adjacency_norm_side_mode_counts_only_stem_and_head() -> None:
    joint = JointModel("resnet_1", 10, 2, [["conv1", "layer1", "fc"]], "side_tune", "one_layer")
    _copy_step_modules(joint)
    with torch.no_grad():
        joint.layers["layer1"][1].conv.weight.add_(1.0)
    assert joint.adjacency_norm().item() == 0.0
    with torch.no_grad():
        joint.layers["conv1"][1].bn.bias.add_(0.5)
        joint.layers["fc"][1].linear.weight.add_(0.25)
    expected = 64 * 0.5**2 + 512 * 10 * 0.25**2
    torch.testing.assert_close(joint.adjacency_norm().item(), expected, rtol=1e-4, atol=1e-6)


def test_param_norm_sums_the_module_each_step_uses_without_bn() -> None:
    joint = JointModel("convnet_1", 10, 3, [["fc"], ["layer1"]])
    layers = joint.layers
    expected = (
        3 * squared_weight_norm(layers["conv1"][0])
        + 2 * squared_weight_norm(layers["layer1"][0])
        + squared_weight_norm(layers["layer1"][1])
        + squared_weight_norm(layers["fc"][0])
        + 2 * squared_weight_norm(layers["fc"][1])
    )
    torch.testing.assert_close(joint.param_norm(), expected)
    with torch.no_grad():
        layers["layer1"][0].bn.weight.fill_(5.0)
    torch.testing.assert_close(joint.param_norm(), expected)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mode": "low_rank"}, "unknown joint mode 'low_rank'; valid: separate, side_tune"),
        ({"stem_head": "mixed"}, "unknown stem_head 'mixed'; valid: separate, summed"),
        ({"mode": "side_tune", "side_module": "one_layer"}, "does not exist for convnet"),
        ({"new_layers_per_step": []}, "one list per step 1..1"),
        ({"new_layers_per_step": ["fc"]}, "expected a list of layer names"),
        ({"new_layers_per_step": [["layer7"]]}, "unknown layer\\(s\\) layer7"),
        ({"new_layers_per_step": [["fc", "fc"]]}, "listed twice"),
        ({"num_steps": 0, "new_layers_per_step": []}, "positive integer"),
    ],
)
def test_bad_joint_specs_are_refused(kwargs: dict, message: str) -> None:
    spec = {"num_steps": 2, "new_layers_per_step": [["fc"]], **kwargs}
    with pytest.raises(Seq2FinalError, match=message):
        JointModel("convnet_1", 10, **spec)


def test_time_step_out_of_range(images: torch.Tensor) -> None:
    with pytest.raises(Seq2FinalError, match="valid: 0..1"):
        JointModel("convnet_1", 10, 2, [["fc"]])(images, 2)


def test_joint_model_accepts_channels_last(images: torch.Tensor) -> None:
    joint = JointModel("resnet_1", 10, 2, [["conv1", "layer1", "fc"]], "side_tune", "one_layer")
    joint.eval()
    with torch.no_grad():
        expected = joint(images, 1)
        joint.to(memory_format=torch.channels_last)
        got = joint(images.contiguous(memory_format=torch.channels_last), 1)
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)


def test_side_module_shape_mismatch_is_an_error_not_a_broadcast() -> None:
    """At 48x48 DenseNet-4's third transition pools 3x3 to 1x1 while its side conv gives 2x2."""
    joint = JointModel("densenet_4", 10, 2, [["layer3"]], "side_tune", "one_layer").eval()
    with torch.no_grad():
        assert joint(torch.rand(2, 3, 64, 64), 1).shape == (2, 10)
        with pytest.raises(Seq2FinalError, match=r"layer3\[1\] outputs \(2, 512, 2, 2\)"):
            joint(torch.rand(2, 3, 48, 48), 1)
