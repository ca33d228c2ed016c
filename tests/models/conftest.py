"""Shared fixtures for the model-zoo tests: tiny seeded images and BN perturbation."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import torch
from torch import nn


@pytest.fixture(autouse=True)
def single_thread() -> Iterator[None]:
    """Run each test on one intra-op thread, restoring the setting afterwards.

    The inputs are tiny, so threads buy nothing, and on a 2-core machine shared with other work a
    second OpenMP thread turns every barrier into a wait for a descheduled thread (forward passes
    measured 100x slower under load).
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def images() -> torch.Tensor:
    """Two 32x32 RGB images in [0, 1], the input models see."""
    generator = torch.Generator().manual_seed(0)
    return torch.rand(2, 3, 32, 32, generator=generator)


def _perturb_batch_norms(model: nn.Module, seed: int = 0) -> nn.Module:
    """Give every BN non-default running statistics and affine parameters.

    Freshly built models have BN at identity-like defaults, which would let a test pass even if BN
    were ignored (not interpolated, not copied, not scaled).
    """
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.BatchNorm2d):
                shape = module.running_mean.shape
                module.running_mean.copy_(0.1 * torch.randn(shape, generator=generator))
                module.running_var.copy_(0.5 + torch.rand(shape, generator=generator))
                module.weight.copy_(1 + 0.1 * torch.randn(shape, generator=generator))
                module.bias.copy_(0.1 * torch.randn(shape, generator=generator))
    return model


@pytest.fixture
def perturb_bn() -> Callable[..., nn.Module]:
    return _perturb_batch_norms
