"""Weight-space paths between models, for the interpolation plots and interpolation methods.

Two fixes relative to the original code's helpers, both so that a path's endpoints are
the models it claims to connect:

* :func:`interpolate` blends *every* floating tensor of the state dict, BN running statistics
  included, and loads the result into a copy. The original kept BN, ResNet downsamples and
  DenseNet's head BN from the start model, and for ResNets evaluated the start model at every
  interior point (its forward ignored the swapped modules).
* :func:`scale_side_modules` scales a side module's *output* by ``s``, so ``s = 0`` is exactly the
  model without it. The original scaled conv weights but left BN offsets (and ResNet downsamples)
  in place, so its ``s = 0`` was not the previous model; and no weight scaling can silence a block
  copy of DenseNet's last block, whose output concatenates its input.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from seq2final.core.errors import Seq2FinalError
from seq2final.models.joint import JointModel


def _blend(
    start: dict[str, torch.Tensor], end: dict[str, torch.Tensor], s: float
) -> dict[str, torch.Tensor]:
    """``(1 - s) * start + s * end`` for floating tensors (exact at s = 0 and 1); others from start."""
    return {
        key: torch.lerp(value, end[key], s) if value.is_floating_point() else value.clone()
        for key, value in start.items()
    }


def _check_fraction(s: float) -> None:
    if not 0.0 <= s <= 1.0:
        raise Seq2FinalError(f"interpolation weight must lie in [0, 1], got {s!r}")


def interpolate(start: nn.Module, end: nn.Module, s: float) -> nn.Module:
    """The model at ``(1 - s) * start + s * end`` in weight space, as a new module.

    ``start`` and ``end`` must share one architecture (same state-dict keys and shapes). Every
    floating parameter and buffer is interpolated; integer buffers (BN's batch counter) come from
    ``start``. Works for plain and joint models alike.
    """
    _check_fraction(s)
    start_state, end_state = start.state_dict(), end.state_dict()
    if start_state.keys() != end_state.keys():
        raise Seq2FinalError("cannot interpolate between models with different layers")
    mismatched = [k for k in start_state if start_state[k].shape != end_state[k].shape]
    if mismatched:
        raise Seq2FinalError(f"cannot interpolate: shapes differ at {mismatched[0]}")
    blended = copy.deepcopy(start)
    blended.load_state_dict(_blend(start_state, end_state, s))
    return blended


def scale_side_modules(joint: JointModel, step: int, s: float) -> JointModel:
    """A copy of ``joint`` on the path from step ``step - 1``'s model (s = 0) to step ``step``'s.

    Summed modules new at ``step`` (side modules, and JST's stem and head copies) have their output
    scaled by ``s``; a module used alone that is new at ``step`` (ST's re-learned ``conv1`` and
    ``fc``, every JM layer) is interpolated in weight space from its predecessor. At ``s = 0`` the
    copy's step ``step`` therefore computes exactly what step ``step - 1`` computes.
    """
    _check_fraction(s)
    if not 1 <= step < joint.num_steps:
        raise Seq2FinalError(f"step must lie in 1..{joint.num_steps - 1}, got {step}")
    scaled = copy.deepcopy(joint)
    before, after = joint.module_path[step - 1], joint.module_path[step]
    for name in joint.layer_names:
        if before[name] == after[name]:
            continue
        if joint.is_summed(name):
            for index in range(before[name] + 1, after[name] + 1):
                scaled.module_scales[name][index] *= s
        else:
            old = joint.modules_of(name)[before[name]].state_dict()
            new = joint.modules_of(name)[after[name]].state_dict()
            scaled.modules_of(name)[after[name]].load_state_dict(_blend(old, new, s))
    return scaled
