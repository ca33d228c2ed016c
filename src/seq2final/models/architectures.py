"""The paper's 12 architectures (ConvNet, DenseNet, ResNet with 1-4 blocks) and their registry.

Every model is a :class:`BlockModel`: a stem ``conv1``, blocks ``layer1`` ... ``layerK`` and a head
``fc``. Those names are the vocabulary of the whole benchmark: freezing, fine-tuning stages, side
modules and the joint model all address layers by them, so the attributes carry exactly these names
and ``state_dict`` keys read as ``layer2.0.conv1.weight``.

The layouts follow the original code number for number,
including its quirks: a 7x7 stride-2 stem with max-pool on 32x32 images, ConvNet blocks without a
ReLU, and PyTorch's default initialisation (the parent torchvision model classes, which re-initialise,
are deliberately not used; only their building blocks are).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn
from torch._C._functorch import is_batchedtensor  # a fused stack's parameters under vmap
from torch.utils.flop_counter import FlopCounterMode

from seq2final.core import torchvision_guard  # noqa: F401  (must precede any torchvision import)
from seq2final.core.errors import Seq2FinalError
from seq2final.core.registry import Registry

from torchvision.models.densenet import _DenseBlock, _Transition  # isort: skip
from torchvision.models.resnet import BasicBlock  # isort: skip

DenseBlock = _DenseBlock
"""torchvision's dense block, the zoo's DenseNet part (public for code that walks its layers)."""

STEM_CHANNELS = 64
DENSE_GROWTH_RATE = 32
DENSE_BOTTLENECK_SIZE = 4

# Block widths and strides shared by ConvNet and ResNet in the original code, keyed by block count.
_BLOCK_CHANNELS: dict[int, list[tuple[int, int]]] = {
    1: [(64, 512)],
    2: [(64, 128), (128, 512)],
    3: [(64, 128), (128, 256), (256, 512)],
    4: [(64, 64), (64, 128), (128, 256), (256, 512)],
}
_BLOCK_STRIDES: dict[int, list[int]] = {1: [2], 2: [2, 2], 3: [2, 2, 2], 4: [1, 2, 2, 2]}
# Dense layers per block, as in the original code; Dense-4 is DenseNet-121's layout.
_DENSE_LAYERS: dict[int, list[int]] = {1: [16], 2: [6, 16], 3: [6, 12, 16], 4: [6, 12, 24, 16]}

PARAMETER_CONVENTIONS = ("paper", "all", "trainable")


@dataclass(frozen=True)
class BlockGeometry:
    """What a side module must match to be added to a block: channels in/out and spatial stride.

    For DenseNet the block includes its transition, so ``out_channels`` is the feature count after
    the transition and ``stride`` is 2 (the transition's pool) except for the last block.
    """

    in_channels: int
    out_channels: int
    stride: int


class Stem(nn.Sequential):
    """7x7 stride-2 conv without bias, BN, ReLU, 3x3 stride-2 max-pool: 32x32 becomes 8x8."""

    def __init__(self, out_channels: int = STEM_CHANNELS) -> None:
        super().__init__(
            OrderedDict(
                conv=nn.Conv2d(3, out_channels, kernel_size=7, stride=2, padding=3, bias=False),
                bn=nn.BatchNorm2d(out_channels),
                relu=nn.ReLU(),
                pool=nn.MaxPool2d(kernel_size=3, stride=2, padding=1),
            )
        )


class ConvBN(nn.Sequential):
    """A 3x3 conv (no bias) followed by BN and, faithfully to the original, no ReLU.

    This is both a ConvNet block and the 1-layer side module of ResNet/DenseNet blocks.
    """

    def __init__(self, in_channels: int, out_channels: int, stride: int) -> None:
        super().__init__(
            OrderedDict(
                conv=nn.Conv2d(
                    in_channels, out_channels, kernel_size=3, stride=stride, padding=1, bias=False
                ),
                bn=nn.BatchNorm2d(out_channels),
            )
        )


class ClassifierHead(nn.Sequential):
    """Global average pool and a linear layer; DenseNet puts BN + ReLU (``norm``) before the pool.

    The pool lives in the head so that ``fc`` maps a feature map to logits, which lets the joint
    model sum whole heads (their linear layers) the way the original JST models do.
    """

    def __init__(self, in_features: int, num_classes: int, norm: bool = False) -> None:
        parts: OrderedDict[str, nn.Module] = OrderedDict()
        if norm:
            parts["norm"] = nn.BatchNorm2d(in_features)
            parts["relu"] = nn.ReLU()
        parts["pool"] = nn.AdaptiveAvgPool2d(1)
        parts["flatten"] = nn.Flatten()
        parts["linear"] = nn.Linear(in_features, num_classes)
        super().__init__(parts)

    def linear_layer(self) -> nn.Linear:
        """The last, linear layer (``self.linear``, typed: a module's attributes are not)."""
        linear = self.linear
        assert isinstance(linear, nn.Linear)
        return linear


class BlockModel(nn.Module):
    """``conv1`` -> ``layer1`` ... ``layerK`` -> ``fc``, with dropout after every layer but ``fc``.

    Dropout is functional and active only in training mode, as in the original: the paper's
    dropout grid {0, 0.5} therefore also perturbs frozen layers' outputs during fine-tuning.
    """

    def __init__(
        self,
        arch: str,
        family: str,
        stem: nn.Module,
        blocks: Sequence[tuple[nn.Module, BlockGeometry]],
        head: nn.Module,
        dropout: float,
    ) -> None:
        super().__init__()
        self.arch = arch
        self.family = family
        self.dropout = dropout
        self.conv1 = stem
        names = ["conv1"]
        self.geometry: dict[str, BlockGeometry] = {}
        for index, (block, geometry) in enumerate(blocks, start=1):
            name = f"layer{index}"
            self.add_module(name, block)
            self.geometry[name] = geometry
            names.append(name)
        self.fc = head
        self.layer_names: tuple[str, ...] = (*names, "fc")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        last = len(self.layer_names) - 1
        for index, name in enumerate(self.layer_names):
            x = getattr(self, name)(x)
            if index < last:
                x = apply_dropout(x, self.dropout, self.training)
        return x

    def forward_with_features(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The penultimate features (what the head's last linear layer sees: after the pool,
        and DenseNet's norm) and the logits, from one pass: the same operations as
        :meth:`forward`, so a loss term reads features without a hook or a second pass."""
        head = self.fc
        if not isinstance(head, ClassifierHead):
            raise Seq2FinalError(
                f"{self.arch}: features need a ClassifierHead as fc, not {type(head).__name__}"
            )
        for name in self.layer_names[:-1]:
            x = apply_dropout(getattr(self, name)(x), self.dropout, self.training)
        for part in list(head)[:-1]:  # the head up to its linear layer (a slice would rebuild it)
            x = part(x)
        return x, head.linear_layer()(x)


def set_dropout(model: nn.Module, rate: float | torch.Tensor) -> None:
    """Set the dropout rate a block or joint model reads on every forward pass: a fit sets its
    trial's rate (a compiled step a tensor, a fused stack one per model). An attribute of the
    model, not a module, so torch's typing of module attributes does not cover it."""
    setattr(model, "dropout", rate)  # noqa: B010


def apply_dropout(x: torch.Tensor, rate: float | torch.Tensor, training: bool) -> torch.Tensor:
    """Dropout at ``rate``: :func:`torch.nn.functional.dropout` for a number; for a tensor (one
    rate per model of a fused stack, under ``vmap``) an explicit mask, which at rate 0 keeps
    every value exactly."""
    if isinstance(rate, torch.Tensor):
        if not training:
            return x
        keep = torch.rand_like(x) >= rate
        return x * keep / (1 - rate)
    if rate > 0:
        return F.dropout(x, rate, training=training)
    return x


def _resnet_layer(in_channels: int, out_channels: int, stride: int) -> nn.Sequential:
    """Two BasicBlocks; the first gets a 1x1 conv + BN shortcut when the shape changes."""
    downsample = None
    if stride != 1 or in_channels != out_channels:
        downsample = nn.Sequential(
            nn.Conv2d(in_channels, out_channels, kernel_size=1, stride=stride, bias=False),
            nn.BatchNorm2d(out_channels),
        )
    return nn.Sequential(
        BasicBlock(in_channels, out_channels, stride, downsample),
        BasicBlock(out_channels, out_channels),
    )


def _plain_blocks(
    block: Callable[[int, int, int], nn.Module],
) -> Callable[[str, str, int, int, float], BlockModel]:
    """A builder of the ConvNet/ResNet layout of the original code: the stem, ``num_blocks`` blocks
    with the shared widths and strides, each made by ``block(in, out, stride)``, and the head."""

    def build(
        arch: str, family: str, num_blocks: int, num_classes: int, dropout: float
    ) -> BlockModel:
        blocks = [
            (block(c_in, c_out, stride), BlockGeometry(c_in, c_out, stride))
            for (c_in, c_out), stride in zip(
                _BLOCK_CHANNELS[num_blocks], _BLOCK_STRIDES[num_blocks], strict=True
            )
        ]
        head = ClassifierHead(_BLOCK_CHANNELS[num_blocks][-1][1], num_classes)
        return BlockModel(arch, family, Stem(), blocks, head, dropout)

    return build


def _densenet(
    arch: str, family: str, num_blocks: int, num_classes: int, dropout: float
) -> BlockModel:
    blocks = []
    features = STEM_CHANNELS
    layer_counts = _DENSE_LAYERS[num_blocks]
    for index, num_layers in enumerate(layer_counts):
        block_in = features
        parts: OrderedDict[str, nn.Module] = OrderedDict(
            dense=_DenseBlock(
                num_layers,
                block_in,
                bn_size=DENSE_BOTTLENECK_SIZE,
                growth_rate=DENSE_GROWTH_RATE,
                drop_rate=0.0,
            )
        )
        features = block_in + num_layers * DENSE_GROWTH_RATE
        stride = 1
        if index < len(layer_counts) - 1:
            parts["transition"] = _Transition(features, features // 2)
            features //= 2
            stride = 2
        blocks.append((nn.Sequential(parts), BlockGeometry(block_in, features, stride)))
    head = ClassifierHead(features, num_classes, norm=True)
    return BlockModel(arch, family, Stem(), blocks, head, dropout)


Builder = Callable[[int, float], BlockModel]
"""``(num_classes, dropout) -> BlockModel``: a freshly initialised model."""


@dataclass(frozen=True)
class Architecture:
    """A registered architecture: its builder, its family and the side modules it supports.

    ``family`` groups architectures in tables and figures (ConvNet, DenseNet, ResNet rows);
    ``side_modules`` names the side-module kinds that exist for its blocks
    (:mod:`seq2final.models.side_modules`): a ConvNet block is one conv + BN already, so it has
    ``block`` side modules only, and the 1-layer side-tuning modes train their block equivalent.
    """

    build: Builder
    family: str
    side_modules: tuple[str, ...] = ("one_layer", "block")


ARCHITECTURES: Registry[Architecture] = Registry("architecture")
"""Public name -> :class:`Architecture`."""


def architecture(
    name: str, family: str, side_modules: tuple[str, ...] = ("one_layer", "block")
) -> Callable[[Builder], Builder]:
    """Register the decorated builder as architecture ``name``."""

    def register(build: Builder) -> Builder:
        ARCHITECTURES.add(name, Architecture(build, family, side_modules))
        return build

    return register


_FAMILIES: dict[str, tuple[Callable[[str, str, int, int, float], BlockModel], tuple[str, ...]]] = {
    "convnet": (_plain_blocks(ConvBN), ("block",)),
    "densenet": (_densenet, ("one_layer", "block")),
    "resnet": (_plain_blocks(_resnet_layer), ("one_layer", "block")),
}
for _family, (_builder, _side_modules) in _FAMILIES.items():
    for _num_blocks in (1, 2, 3, 4):
        _name = f"{_family}_{_num_blocks}"
        architecture(_name, _family, _side_modules)(partial(_builder, _name, _family, _num_blocks))


def build_model(name: str, num_classes: int, dropout: float = 0.0) -> BlockModel:
    """A freshly (PyTorch-default) initialised model of a registered architecture."""
    builder = ARCHITECTURES[name].build
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
        raise Seq2FinalError(f"num_classes must be a positive integer, got {num_classes!r}")
    if not 0.0 <= dropout <= 1.0:
        raise Seq2FinalError(f"dropout must lie in [0, 1], got {dropout!r}")
    return builder(num_classes, float(dropout))


def layer_names(model: nn.Module) -> list[str]:
    """``conv1``, ``layer1`` ... ``layerK``, ``fc`` of a block model or joint model."""
    names = getattr(model, "layer_names", None)
    if names is None:
        raise Seq2FinalError(
            f"{type(model).__name__} has no layer names; build it with build_model"
        )
    return list(names)


def set_trainable(model: nn.Module, layers: Sequence[str]) -> None:
    """Make exactly ``layers`` trainable and freeze every other layer (``requires_grad``).

    BN running statistics of frozen layers still update in training mode, as in the original; a
    caller that wants them fixed puts those layers in eval mode.
    """
    valid = layer_names(model)
    unknown = [name for name in layers if name not in valid]
    if unknown:
        raise Seq2FinalError(f"unknown layer(s) {', '.join(unknown)}; valid: {', '.join(valid)}")
    for name in valid:
        getattr(model, name).requires_grad_(name in layers)


def decayed_parameters(module: nn.Module) -> Iterator[nn.Parameter]:
    """Conv and linear weights and biases: what the original's L2 penalty covers (BN excluded)."""
    for sub in module.modules():
        if isinstance(sub, nn.Conv2d | nn.Linear):
            yield from sub.parameters(recurse=False)


def squared_weight_norm(module: nn.Module) -> torch.Tensor:
    """Sum of squares of :func:`decayed_parameters`, the ``wd`` term of the training loss."""
    return sum_of_squares(list(decayed_parameters(module)))


def sum_of_squares(
    tensors: Sequence[torch.Tensor],
    minus: Sequence[torch.Tensor] | None = None,
    weights: Sequence[torch.Tensor] | None = None,
) -> torch.Tensor:
    """Σ_i Σ w_i ⊙ (t_i − m_i)² over lists of tensors (``minus`` 0 and ``weights`` 1 when not
    given; weights non-negative): the L2, EWC and adjacency penalties of every training step.

    On CUDA this is a few ``torch._foreach_*`` calls (:func:`foreach_sum_of_squares`), a fused
    kernel each, instead of two or three small kernels per tensor and as many backwards. The CPU
    has no fused foreach kernels (they loop over the tensors) and its foreach L1 norm sums less
    accurately, so it keeps one sum per tensor; so does ``vmap`` (a fused stack), which has no
    batching rules for foreach ops and runs each tensor's kernels once for all its models.
    """
    if not tensors:
        return torch.zeros(())
    if tensors[0].is_cuda and not any(is_batchedtensor(t) for t in tensors):
        return foreach_sum_of_squares(tensors, minus, weights)
    terms = list(tensors) if minus is None else [t - m for t, m in zip(tensors, minus, strict=True)]
    terms = [term.pow(2) for term in terms]
    if weights is not None:
        terms = [w * term for w, term in zip(weights, terms, strict=True)]
    return torch.stack([term.sum() for term in terms]).sum()


def foreach_sum_of_squares(
    tensors: Sequence[torch.Tensor],
    minus: Sequence[torch.Tensor] | None = None,
    weights: Sequence[torch.Tensor] | None = None,
) -> torch.Tensor:
    """:func:`sum_of_squares` in ``torch._foreach_*`` calls (the per-tensor sums are L1 norms,
    the terms being non-negative)."""
    terms = list(tensors) if minus is None else torch._foreach_sub(list(tensors), list(minus))
    terms = torch._foreach_mul(terms, terms)
    if weights is not None:
        torch._foreach_mul_(terms, list(weights))
    return torch.stack(torch._foreach_norm(terms, 1)).sum()


def count_parameters(model: nn.Module, convention: str = "paper") -> int:
    """Parameter count under one of three conventions.

    ``paper`` reproduces Table 7: conv weights plus linear weight and bias, without BN parameters
    and without ResNet's downsample convs (the original's ``get_param_vec`` skipped them).
    ``all`` counts every parameter; ``trainable`` only those with ``requires_grad``.
    """
    if convention == "paper":
        return sum(
            p.numel()
            for name, sub in model.named_modules()
            if isinstance(sub, nn.Conv2d | nn.Linear) and "downsample" not in name.split(".")
            for p in sub.parameters(recurse=False)
        )
    if convention == "all":
        return sum(p.numel() for p in model.parameters())
    if convention == "trainable":
        return sum(p.numel() for p in model.parameters() if p.requires_grad)
    raise Seq2FinalError(
        f"unknown parameter convention '{convention}'; valid: {', '.join(PARAMETER_CONVENTIONS)}"
    )


def forward_macs(model: nn.Module, image_size: int = 32) -> int:
    """Multiply-accumulates of one forward pass on one image (convolutions and matmuls only).

    Counted by :class:`torch.utils.flop_counter.FlopCounterMode`, which reports 2 FLOPs per MAC;
    BN, pooling and activations are not counted.
    """
    parameter = next(model.parameters())
    x = torch.zeros(1, 3, image_size, image_size, device=parameter.device, dtype=parameter.dtype)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            model(x)
    finally:
        model.train(was_training)
    return counter.get_total_flops() // 2
