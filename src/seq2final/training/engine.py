"""The engine: how fits run (batch sizes, input scale, device, precision), and inference with it.

These options change how a fit computes but no method's hyper-parameters; the ones that change
what it computes (:meth:`Engine.results_key`) are part of every stored state's and job's key.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import torch
from pydantic import Field, field_validator, model_validator
from torch import nn

from seq2final.core.errors import Seq2FinalError
from seq2final.core.schema import StrictModel
from seq2final.models import BlockModel, JointModel, network_of
from seq2final.training.augment import Augment
from seq2final.training.tensors import TensorSplit

if TYPE_CHECKING:  # a task is what the engine's fusability reads; objectives import the engine
    from seq2final.training.objectives import Task

AUTO_FUSE = 16
"""Trials per stack under ``fuse: auto`` on CUDA: a paper grid of 8 (or 16 with a penalty's
values) in one fit."""


class Engine(StrictModel):
    """How fits run, independent of any method's hyper-parameters (the ``training`` block).

    ``input_scale``: ``unit`` feeds images scaled to [0, 1]; ``raw`` feeds the 0-255 values the
    original code fed. ``device``: ``auto`` picks CUDA when available.
    ``freeze_bn_stats``: frozen layers' BN statistics stay fixed (the original let them move).
    ``fuse``: how many of a fit's trials train together as one stacked model
    (:mod:`seq2final.training.fused`; :func:`fuse_width`); ``auto`` fuses on CUDA and not on
    the CPU, where a stack runs slower than its models one after another. It changes how trials
    are scheduled, not what a fit computes, so it is no part of any key. ``compile``: a single
    fit's training step (forward, loss and penalties) runs through ``torch.compile``; like
    ``channels_last`` it changes how a fit computes, not what, so it is no part of any key
    either.
    ``augment``: each training image's own draw of flips and crops or of RandAugment
    (:mod:`seq2final.training.augment`); off by default, and part of the key when on.
    """

    batch_size: int = Field(default=100, ge=1)
    eval_batch_size: int = Field(default=1000, ge=1)
    input_scale: Literal["unit", "raw"] = "unit"
    device: str = "auto"
    channels_last: bool = False
    amp: Literal["none", "bf16", "fp16"] = "none"
    patience: int = Field(default=6, ge=1)
    freeze_bn_stats: bool = False
    fuse: Literal["auto"] | int = "auto"  # checked first by _fuse_value: one message for all
    compile: bool = False
    augment: Augment = "none"

    @field_validator("amp", "augment", mode="before")
    @classmethod
    def _none_typed(cls, value: Any) -> Any:
        """``--params training.augment=none`` reaches here as null (the command line reads
        ``none`` as null, as YAML does ``~``): for these options null means ``none``."""
        return "none" if value is None else value

    @field_validator("fuse", mode="before")
    @classmethod
    def _fuse_value(cls, value: Any) -> str | int:
        if value == "auto" or (type(value) is int and value >= 1):
            return value
        raise ValueError(f"fuse {value!r}: valid: auto or a number of trials >= 1")

    @model_validator(mode="after")
    def _fusable(self) -> Engine:
        unsupported = unfusable(self)
        if self.fuse != "auto" and self.fuse > 1 and unsupported:
            raise ValueError(
                f"fuse {self.fuse} with {', '.join(unsupported)}: fused trials support none of "
                "them; valid: fuse 1 or auto with those options"
            )
        return self

    def torch_device(self) -> torch.device:
        """The device fits run on; a device or precision this machine lacks is one line."""
        if self.device == "auto":
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        else:
            try:
                device = torch.device(self.device)
            except RuntimeError:
                raise Seq2FinalError(
                    f"unknown device '{self.device}'; valid: auto, cpu, cuda, cuda:N"
                ) from None
        if device.type == "cuda" and not torch.cuda.is_available():
            raise Seq2FinalError(f"device '{self.device}' requested but CUDA is not available")
        if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
            raise Seq2FinalError(
                f"device '{self.device}' requested but this machine has "
                f"{torch.cuda.device_count()} CUDA device(s); valid: auto, cpu, cuda, "
                f"cuda:0..{torch.cuda.device_count() - 1}"
            )
        if self.amp == "fp16" and device.type != "cuda":
            raise Seq2FinalError(
                f"amp 'fp16' needs a CUDA device, not '{device}' (device '{self.device}'); "
                "valid on CPU: none, bf16"
            )
        return device

    def recorded(self) -> dict[str, Any]:
        """Every option, as a job's record keeps them; ``augment`` only when on, so a record
        made without it is the record made before the option existed, byte for byte."""
        return self.model_dump(exclude={"augment"} if self.augment == "none" else set())

    def results_key(self) -> dict[str, Any]:
        """The options that change what a fit computes (the device does not, by intent).
        ``augment`` appears only when on, so every key made before it existed stays."""
        return {
            "batch_size": self.batch_size,
            "input_scale": self.input_scale,
            "amp": self.amp,
            "patience": self.patience,
            "freeze_bn_stats": self.freeze_bn_stats,
            **({"augment": self.augment} if self.augment != "none" else {}),
        }


def unfusable(engine: Engine, task: Task | None = None) -> list[str]:
    """What keeps a fit's trials from training as one stacked model
    (:mod:`seq2final.training.fused`): the engine's options a stack cannot run (fp16 loss
    scaling, channels_last, compile) and, given the fit's task, its callbacks (a stack calls
    none), its loss terms not written for ``vmap`` or reading features, and an optimiser other than Adam (a stack
    runs its own). Empty: the trials can fuse.

    The one place this is decided: the engine's check of an explicit ``fuse``, the width a fit's
    trials train at (:func:`fuse_width`) and :func:`~seq2final.training.fused.fit_fused`'s
    refusal all ask here."""
    options = {"amp fp16": engine.amp == "fp16", "channels_last": engine.channels_last,
               "compile": engine.compile}  # fmt: skip
    found = [name for name, on in options.items() if on]
    if task is not None:
        found += [t.name for t in task.loss_terms if not t.fusable or t.uses_features]
        found += [type(c).__name__ for c in task.callbacks]
        if task.optimizer_recipe.name != "adam":
            found.append(f"optimizer {task.optimizer_recipe.name}")
    return found


def fuse_width(engine: Engine, task: Task) -> int:
    """How many of the task's trials train together: 1 where :func:`unfusable` finds anything,
    else ``fuse``, or for ``auto`` :data:`AUTO_FUSE` on CUDA and 1 on the CPU (where a stack
    runs slower than its models one after another)."""
    if unfusable(engine, task):
        return 1
    if engine.fuse != "auto":
        return int(engine.fuse)
    return AUTO_FUSE if engine.torch_device().type == "cuda" else 1


def pick_fast_kernels(device: torch.device) -> None:
    """On CUDA, let cuDNN time its convolution algorithms once per shape and keep the fastest:
    a fit repeats the same few batch shapes thousands of times. (GPU results are not bitwise
    reproducible anyway; the CPU, where they are, is left alone.)"""
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True


def scale_images(x: torch.Tensor, engine: Engine) -> torch.Tensor:
    """uint8 images to the float input the models see (``unit``: /255, ``raw``: 0-255), in the
    default float type (float32; tests that compare fits exactly run in float64)."""
    x = x.to(torch.get_default_dtype())
    if engine.input_scale == "unit":
        x = x / 255.0
    if engine.channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    return x


def autocast(engine: Engine, device: torch.device) -> Any:
    """The engine's mixed-precision context on ``device`` (a no-op for ``amp: none``)."""
    if engine.amp == "none":
        return torch.autocast(device.type, enabled=False)
    dtype = torch.bfloat16 if engine.amp == "bf16" else torch.float16
    return torch.autocast(device.type, dtype=dtype)


def run_model(model: nn.Module, x: torch.Tensor, step: int | None) -> torch.Tensor:
    """A plain model's forward, or a joint model's at time ``step`` (either with an output
    transform: :class:`~seq2final.models.TransformedModel`)."""
    if isinstance(network_of(model), JointModel):
        if step is None:
            raise Seq2FinalError("a joint model needs the time step to run at")
        return model(x, step)
    return model(x)


def run_model_with_features(
    model: nn.Module, x: torch.Tensor, step: int | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """A block model's penultimate features and logits from one forward pass
    (:meth:`~seq2final.models.BlockModel.forward_with_features`), for a loss term that reads
    features; a joint model, whose heads sum per step, has no one feature vector to give."""
    if not isinstance(model, BlockModel) or step is not None:
        raise Seq2FinalError(
            f"a loss term reading features needs a block model, not {type(model).__name__}; "
            "valid: the models of registered architectures"
        )
    return model.forward_with_features(x)


def layer_inputs(
    model: nn.Module, layer: nn.Module, data: TensorSplit, engine: Engine
) -> torch.Tensor:
    """What ``layer`` of ``model`` receives for every image of ``data``, on the model's device,
    from one :func:`predict_logits` pass (eval mode, the engine's evaluation batches and
    precision): a frozen body's features, read by a hook removed afterwards."""
    captured: list[torch.Tensor] = []
    hook = layer.register_forward_pre_hook(lambda module, args: captured.append(args[0].detach()))
    try:
        predict_logits(model, data, engine)
    finally:
        hook.remove()
    return torch.cat(captured)


@torch.no_grad()
def predict_logits(
    model: nn.Module,
    data: TensorSplit,
    engine: Engine,
    step: int | None = None,
    on_device: bool = False,
) -> torch.Tensor:
    """Logits for every sample, in eval mode, as float32 on the CPU (``on_device``: left on the
    model's device, as a fit's validation reads them without a copy per batch)."""
    device = next(model.parameters()).device
    output_device = device if on_device else torch.device("cpu")
    was_training = model.training
    model.eval()
    outputs = []
    try:
        for start in range(0, len(data), engine.eval_batch_size):
            x = scale_images(data.x[start : start + engine.eval_batch_size].to(device), engine)
            with autocast(engine, device):
                outputs.append(run_model(model, x, step).float().to(output_device))
    finally:
        model.train(was_training)
    return torch.cat(outputs)


def accuracy(model: nn.Module, data: TensorSplit, engine: Engine, step: int | None = None) -> float:
    """The model's accuracy on ``data`` (eval mode, at time ``step`` for a joint model)."""
    logits = predict_logits(model, data, engine, step)
    return float((logits.argmax(1) == data.y.cpu()).float().mean())
