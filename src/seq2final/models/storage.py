"""Models to and from plain payloads (constructor spec + weights), for stores and checkpoints.

A stored model must come back as the same kind of module with the same layout, so the payload
records how to build it (architecture, class count, joint-model layout) next to its
``state_dict``; loading rebuilds the module and then loads the weights. Only tensors and plain
Python values are stored, so payloads load with ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from seq2final.core.errors import Seq2FinalError
from seq2final.models.architectures import BlockModel, ClassifierHead, build_model
from seq2final.models.joint import JointModel
from seq2final.models.transforms import OUTPUT_TRANSFORMS, TransformedModel, network_of


def num_classes_of(model: nn.Module) -> int:
    """The class count of a block or joint model (its head's output size), or of the one a
    transformed model is made of."""
    model = network_of(model)
    head = model.modules_of("fc")[0] if isinstance(model, JointModel) else model.fc
    if isinstance(head, nn.Linear):
        return head.out_features
    if not isinstance(head, ClassifierHead):
        raise Seq2FinalError(f"{type(model).__name__}'s fc is no ClassifierHead or Linear layer: "
                             "its class count is unknown")  # fmt: skip
    return head.linear_layer().out_features


def model_spec(model: nn.Module) -> dict[str, Any]:
    """What :func:`build_from_spec` needs to rebuild ``model``'s layout."""
    if isinstance(model, TransformedModel):
        return {
            "type": "transformed",
            "transform": model.transform_name,
            "network": model_spec(model.network),
        }
    if isinstance(model, JointModel):
        return {
            "type": "joint",
            "arch": model.arch,
            "num_classes": model.num_classes,
            "num_steps": model.num_steps,
            "new_layers_per_step": model.new_layers_per_step,
            "mode": model.mode,
            "side_module": model.side_module,
            "stem_head": model.stem_head,
            "dropout": model.dropout,
        }
    if isinstance(model, BlockModel):
        return {
            "type": "block",
            "arch": model.arch,
            "num_classes": num_classes_of(model),
            "dropout": model.dropout,
        }
    raise Seq2FinalError(
        f"cannot store a {type(model).__name__}; expected a block or joint model, or either "
        "with an output transform (TransformedModel)"
    )


def build_from_spec(spec: dict[str, Any]) -> nn.Module:
    """A freshly initialised module with the layout ``spec`` describes."""
    kind = spec.get("type")
    if kind == "block":
        return build_model(spec["arch"], spec["num_classes"], spec["dropout"])
    if kind == "joint":
        arguments = {k: v for k, v in spec.items() if k != "type"}
        if "side_kind" in arguments:  # payloads stored before the parameter was renamed
            arguments["side_module"] = arguments.pop("side_kind")
        return JointModel(**arguments)
    if kind == "transformed":
        return TransformedModel(
            build_from_spec(spec["network"]), OUTPUT_TRANSFORMS[spec["transform"]]()
        )
    raise Seq2FinalError(f"unknown stored model type {kind!r}; valid: block, joint, transformed")


def pack(model: nn.Module) -> dict[str, Any]:
    """Spec, CPU weights, trainable flags and (joint models) side-module scales."""
    payload: dict[str, Any] = {
        "spec": model_spec(model),
        "state_dict": {k: v.detach().cpu().clone() for k, v in model.state_dict().items()},
        "frozen": [name for name, p in model.named_parameters() if not p.requires_grad],
    }
    network = network_of(model)
    if isinstance(network, JointModel):
        payload["module_scales"] = network.module_scales
    return payload


def unpack(payload: dict[str, Any], device: torch.device | str = "cpu") -> nn.Module:
    """The module :func:`pack` stored, on ``device``, in eval mode."""
    model = build_from_spec(payload["spec"])
    model.load_state_dict(payload["state_dict"])
    frozen = set(payload.get("frozen", ()))
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(name not in frozen)
    network = network_of(model)
    if isinstance(network, JointModel) and "module_scales" in payload:
        network.module_scales = {k: list(v) for k, v in payload["module_scales"].items()}
    return model.to(device).eval()
