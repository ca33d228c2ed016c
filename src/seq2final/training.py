"""One fit loop for every method of the benchmark.

Every method trains through :func:`fit`: ERM on one or several steps, IRM and DRO over steps as
domains, fine-tuning stages with frozen layers, EWC towards earlier models, and the joint models.
What differs between them is only the *objective* (how a list of per-domain batches becomes a
loss), so the loop itself keeps the original code's rules in one place (reference §3.1):

* Adam with a fresh optimiser per fit, a constant learning rate and the L2 penalty added to the
  loss (BN parameters excluded), not Adam's ``weight_decay``;
* the model stays in training mode, so frozen layers' BN statistics keep updating, unless
  ``freeze_bn_stats`` is set;
* epoch 0 is the initial model, evaluated before any step, and eligible for selection;
* the epoch with the strictly highest validation accuracy is kept (the earliest wins ties);
* training stops after ``patience`` consecutive epochs whose validation accuracy is not above the
  previous epoch's (the original's "more than 5" is ``patience: 6``), or at ``max_epochs``.

Unlike the original, one validation pass per epoch yields both loss and accuracy, and training
metrics accumulate during the training pass itself, so an epoch costs one pass over the training
data and one over the validation data. Data stay uint8 tensors (moved to the device once); a batch
is an index slice, scaled to float on the device.
"""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from seq2final.errors import Seq2FinalError
from seq2final.models import JointModel, set_trainable, squared_weight_norm

log = logging.getLogger(__name__)

INPUT_SCALES = ("unit", "raw")
AMP_MODES = ("none", "bf16", "fp16")
OBJECTIVES = ("erm", "irm", "dro", "joint")


@dataclass(frozen=True)
class Engine:
    """How fits run, independent of any method's hyper-parameters.

    ``input_scale``: ``unit`` feeds images scaled to [0, 1]; ``raw`` feeds the 0-255 values the
    original code fed (reference §1.1). ``device``: ``auto`` picks CUDA when available.
    """

    batch_size: int = 100
    eval_batch_size: int = 1000
    input_scale: str = "unit"
    device: str = "auto"
    channels_last: bool = False
    amp: str = "none"
    patience: int = 6
    freeze_bn_stats: bool = False

    def __post_init__(self) -> None:
        if self.input_scale not in INPUT_SCALES:
            raise Seq2FinalError(
                f"unknown input_scale '{self.input_scale}'; valid: {', '.join(INPUT_SCALES)}"
            )
        if self.amp not in AMP_MODES:
            raise Seq2FinalError(f"unknown amp '{self.amp}'; valid: {', '.join(AMP_MODES)}")

    def torch_device(self) -> torch.device:
        if self.device == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        try:
            device = torch.device(self.device)
        except RuntimeError:
            raise Seq2FinalError(
                f"unknown device '{self.device}'; valid: auto, cpu, cuda, cuda:N"
            ) from None
        if device.type == "cuda" and not torch.cuda.is_available():
            raise Seq2FinalError(f"device '{self.device}' requested but CUDA is not available")
        if self.amp == "fp16" and device.type != "cuda":
            raise Seq2FinalError(
                f"amp 'fp16' needs a CUDA device, not '{device}'; valid on CPU: none, bf16"
            )
        return device

    def results_key(self) -> dict[str, Any]:
        """The options that change what a fit computes (the device does not, by intent)."""
        return {
            "batch_size": self.batch_size,
            "input_scale": self.input_scale,
            "amp": self.amp,
            "patience": self.patience,
            "freeze_bn_stats": self.freeze_bn_stats,
        }


@dataclass
class Data:
    """One split of one step: uint8 images N×C×H×W, int64 labels, optional per-sample weights."""

    x: torch.Tensor
    y: torch.Tensor
    weight: torch.Tensor | None = None

    @classmethod
    def from_arrays(cls, x: np.ndarray, y: np.ndarray, weight: np.ndarray | None = None) -> Data:
        return cls(
            torch.from_numpy(np.ascontiguousarray(x)),
            torch.from_numpy(np.asarray(y, dtype=np.int64)),
            None if weight is None else torch.as_tensor(weight, dtype=torch.float32),
        )

    @classmethod
    def concat(cls, parts: Sequence[Data]) -> Data:
        """Several steps as one set; weights default to 1 where some parts have them."""
        weights = None
        if any(p.weight is not None for p in parts):
            weights = torch.cat(
                [p.weight if p.weight is not None else torch.ones(len(p)) for p in parts]
            )
        return cls(torch.cat([p.x for p in parts]), torch.cat([p.y for p in parts]), weights)

    def __len__(self) -> int:
        return len(self.y)

    def to(self, device: torch.device) -> Data:
        return Data(
            self.x.to(device),
            self.y.to(device),
            None if self.weight is None else self.weight.to(device),
        )


@dataclass
class Task:
    """What one fit trains: data, objective and the non-searched parts of the loss.

    ``steps`` gives, per training domain, the time index a joint model runs it at (``None`` for a
    plain model); ``valid_step`` likewise for the validation set. ``step_weights`` are the joint
    loss's c_t. ``anchors`` are EWC's (parameters, Fisher) pairs of earlier models.
    """

    domains: list[Data]
    valid: Data
    objective: str = "erm"
    steps: list[int | None] | None = None
    valid_step: int | None = None
    step_weights: list[float] | None = None
    trainable: Sequence[str] | None = None
    anchors: list[tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]] = field(
        default_factory=list
    )

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise Seq2FinalError(
                f"unknown objective '{self.objective}'; valid: {', '.join(OBJECTIVES)}"
            )
        if not self.domains or any(len(d) == 0 for d in self.domains) or len(self.valid) == 0:
            raise Seq2FinalError("a fit needs non-empty training domains and validation set")


@dataclass(frozen=True)
class HyperParameters:
    """The searched values of one fit; penalties default to off."""

    lr: float
    weight_decay: float = 0.0
    dropout: float = 0.0
    irm_penalty: float = 1.0
    ewc_lambda: float = 0.0
    adjacency: float = 0.0

    @classmethod
    def from_dict(cls, values: dict[str, float]) -> HyperParameters:
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(values) - known)
        if unknown:
            raise Seq2FinalError(
                f"unknown hyper-parameter(s) {', '.join(unknown)}; valid: {', '.join(sorted(known))}"
            )
        return cls(**{k: float(v) for k, v in values.items()})


@dataclass
class FitResult:
    """The selected epoch's model (loaded into the model passed in) and the per-epoch history."""

    valid_accuracy: float
    best_epoch: int
    epochs: int
    history: list[dict[str, float]]


EpochCallback = Callable[[int, float], None]


def scale_images(x: torch.Tensor, engine: Engine) -> torch.Tensor:
    """uint8 images to the float input the models see (``unit``: /255, ``raw``: 0-255)."""
    x = x.float()
    if engine.input_scale == "unit":
        x = x / 255.0
    if engine.channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    return x


def _autocast(engine: Engine, device: torch.device) -> Any:
    if engine.amp == "none":
        return torch.autocast(device.type, enabled=False)
    dtype = torch.bfloat16 if engine.amp == "bf16" else torch.float16
    return torch.autocast(device.type, dtype=dtype)


def run_model(model: nn.Module, x: torch.Tensor, step: int | None) -> torch.Tensor:
    """A plain model's forward, or a joint model's at time ``step``."""
    if isinstance(model, JointModel):
        if step is None:
            raise Seq2FinalError("a joint model needs the time step to run at")
        return model(x, step)
    return model(x)


def penalty_norm(model: nn.Module) -> torch.Tensor:
    """The L2 term: squared conv/linear weights (a joint model sums the modules each step uses)."""
    if isinstance(model, JointModel):
        return model.param_norm()
    return squared_weight_norm(model)


def _weighted_ce(
    logits: torch.Tensor, y: torch.Tensor, weight: torch.Tensor | None
) -> torch.Tensor:
    losses = F.cross_entropy(logits.float(), y, reduction="none")
    if weight is not None:
        losses = losses * weight
    return losses.mean()


def irm_penalty(logits: torch.Tensor, y: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """The original's IRM penalty on one domain batch (reference §3.3).

    Logits are scaled by a per-class dummy vector ``w = 1``; the samples are permuted, and the
    penalty is the dot product of the gradients w.r.t. ``w`` of the mean loss over the even- and
    the odd-indexed halves. The graph is kept so the penalty back-propagates into the model.
    """
    scale = torch.ones(logits.shape[1], device=logits.device, requires_grad=True)
    order = torch.randperm(len(y), generator=generator).to(logits.device)
    scaled, labels = logits.float()[order] * scale, y[order]
    first = F.cross_entropy(scaled[0::2], labels[0::2])
    second = F.cross_entropy(scaled[1::2], labels[1::2])
    (g1,) = torch.autograd.grad(first, [scale], create_graph=True)
    (g2,) = torch.autograd.grad(second, [scale], create_graph=True)
    return (g1 * g2).sum()


def ewc_penalty(
    model: nn.Module, anchors: Sequence[tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]]
) -> torch.Tensor:
    """Σ_k Σ F_k ⊙ (θ − θ_k)² over every earlier model k (no ½, as in the original)."""
    total = torch.zeros((), device=next(model.parameters()).device)
    for name, parameter in model.named_parameters():
        for values, fisher in anchors:
            if name in fisher:
                total = total + (fisher[name] * (parameter - values[name]).pow(2)).sum()
    return total


@dataclass
class _Batch:
    x: torch.Tensor
    y: torch.Tensor
    weight: torch.Tensor | None
    step: int | None
    c: float


def _loss(
    model: nn.Module,
    batches: list[_Batch],
    task: Task,
    hp: HyperParameters,
    generator: torch.Generator,
) -> tuple[torch.Tensor, float, int, int]:
    """The objective's loss; also its summed CE, correct count and sample count for the metrics."""
    ce_terms, ce_sum, correct, count = [], 0.0, 0, 0
    penalties = torch.zeros((), device=batches[0].x.device)
    for batch in batches:
        logits = run_model(model, batch.x, batch.step)
        ce = _weighted_ce(logits, batch.y, batch.weight)
        if task.objective == "irm":
            ce = ce + hp.irm_penalty * irm_penalty(logits, batch.y, generator)
        ce_terms.append(ce * batch.c)
        with torch.no_grad():
            ce_sum += float(F.cross_entropy(logits.float(), batch.y, reduction="sum"))
            correct += int((logits.argmax(1) == batch.y).sum())
            count += len(batch.y)
    if task.objective == "dro":
        # Only the worst domain's loss is back-propagated; the others are discarded.
        data_loss = torch.stack(ce_terms).max()
    elif task.objective == "joint":
        data_loss = torch.stack(ce_terms).sum() / len(ce_terms)
    else:
        data_loss = torch.stack(ce_terms).sum()
    if hp.weight_decay:
        penalties = penalties + hp.weight_decay * penalty_norm(model)
    if hp.ewc_lambda and task.anchors:
        penalties = penalties + hp.ewc_lambda * ewc_penalty(model, task.anchors)
    if hp.adjacency and isinstance(model, JointModel):
        penalties = penalties + hp.adjacency * model.adjacency_norm()
    return data_loss + penalties, ce_sum, correct, count


class _Cycler:
    """Batches of one domain as index slices of a shuffled order, reshuffled when exhausted."""

    def __init__(self, size: int, batch_size: int, generator: torch.Generator) -> None:
        self.size, self.batch_size, self.generator = size, batch_size, generator
        self.order = torch.randperm(size, generator=generator)
        self.position = 0

    def next(self) -> torch.Tensor:
        if self.position >= self.size:
            self.order = torch.randperm(self.size, generator=self.generator)
            self.position = 0
        indices = self.order[self.position : self.position + self.batch_size]
        self.position += self.batch_size
        return indices


@torch.no_grad()
def predict_logits(
    model: nn.Module, data: Data, engine: Engine, step: int | None = None
) -> torch.Tensor:
    """Logits for every sample, in eval mode, as float32 on the CPU."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    outputs = []
    try:
        for start in range(0, len(data), engine.eval_batch_size):
            x = scale_images(data.x[start : start + engine.eval_batch_size].to(device), engine)
            with _autocast(engine, device):
                outputs.append(run_model(model, x, step).float().cpu())
    finally:
        model.train(was_training)
    return torch.cat(outputs)


def _validate(model: nn.Module, task: Task, engine: Engine) -> tuple[float, float]:
    logits = predict_logits(model, task.valid, engine, task.valid_step)
    y = task.valid.y.cpu()
    loss = float(F.cross_entropy(logits, y))
    return loss, float((logits.argmax(1) == y).float().mean())


def _train_mode(model: nn.Module, engine: Engine) -> None:
    """Training mode; with ``freeze_bn_stats`` the BN layers of frozen parameters stay fixed."""
    model.train()
    if engine.freeze_bn_stats:
        for module in model.modules():
            if isinstance(module, nn.modules.batchnorm._BatchNorm) and not any(
                p.requires_grad for p in module.parameters()
            ):
                module.eval()


def fit(
    model: nn.Module,
    task: Task,
    hp: HyperParameters,
    engine: Engine,
    max_epochs: int,
    seed: int,
    on_epoch: EpochCallback | None = None,
    progress: Callable[[int], None] | None = None,
) -> FitResult:
    """Train ``model`` in place on ``task`` and load the selected epoch's weights into it.

    ``on_epoch(epoch, valid_accuracy)`` runs after every epoch's validation (a tuner reports to
    its pruner there and may raise to stop the fit); ``progress(1)`` after every epoch (a progress
    bar). The model must already be on its device.
    """
    device = next(model.parameters()).device
    if engine.channels_last:
        model.to(memory_format=torch.channels_last)
    torch.manual_seed(seed)  # dropout and any other global draws
    generator = torch.Generator().manual_seed(seed)
    flags = {name: p.requires_grad for name, p in model.named_parameters()}
    if task.trainable is not None:
        set_trainable(model, task.trainable)
    model.dropout = hp.dropout
    parameters = [p for p in model.parameters() if p.requires_grad]
    if not parameters:
        raise Seq2FinalError("nothing to train: every parameter of the model is frozen")
    optimizer = torch.optim.Adam(parameters, lr=hp.lr)
    scaler = torch.amp.GradScaler(device.type, enabled=engine.amp == "fp16")
    domains = [d.to(device) for d in task.domains]
    steps = task.steps or [None] * len(domains)
    weights = task.step_weights or [1.0] * len(domains)
    cyclers = [_Cycler(len(d), engine.batch_size, generator) for d in domains]
    batches_per_epoch = max(math.ceil(len(d) / engine.batch_size) for d in domains)

    valid_loss, valid_accuracy = _validate(model, task, engine)
    history = [_row(0, math.nan, math.nan, valid_loss, valid_accuracy)]
    best_accuracy, best_epoch = valid_accuracy, 0
    best_state = _snapshot(model)
    if on_epoch is not None:
        on_epoch(0, valid_accuracy)
    stalls, epoch = 0, 0
    try:
        for epoch in range(1, max_epochs + 1):
            _train_mode(model, engine)
            ce_sum, correct, count = 0.0, 0, 0
            for _ in range(batches_per_epoch):
                batches = []
                for domain, cycler, step, c in zip(domains, cyclers, steps, weights, strict=True):
                    index = cycler.next().to(device)
                    weight = None if domain.weight is None else domain.weight[index]
                    batches.append(
                        _Batch(
                            scale_images(domain.x[index], engine), domain.y[index], weight, step, c
                        )
                    )
                with _autocast(engine, device):
                    loss, batch_ce, batch_correct, batch_count = _loss(
                        model, batches, task, hp, generator
                    )
                optimizer.zero_grad(set_to_none=True)
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
                ce_sum, correct, count = (
                    ce_sum + batch_ce,
                    correct + batch_correct,
                    count + batch_count,
                )
            previous_accuracy = valid_accuracy
            valid_loss, valid_accuracy = _validate(model, task, engine)
            history.append(_row(epoch, ce_sum / count, correct / count, valid_loss, valid_accuracy))
            if progress is not None:
                progress(1)
            if valid_accuracy > best_accuracy:
                best_accuracy, best_epoch = valid_accuracy, epoch
                best_state = _snapshot(model)
            stalls = 0 if valid_accuracy > previous_accuracy else stalls + 1
            if on_epoch is not None:
                on_epoch(epoch, valid_accuracy)
            if stalls >= engine.patience:
                break
    finally:
        model.load_state_dict(best_state)
        for name, parameter in model.named_parameters():
            parameter.requires_grad_(flags[name])
        model.eval()
    return FitResult(best_accuracy, best_epoch, epoch, history)


def _row(
    epoch: int, train_loss: float, train_acc: float, valid_loss: float, valid_acc: float
) -> dict[str, float]:
    return {
        "epoch": epoch,
        "train_loss": train_loss,
        "train_accuracy": train_acc,
        "valid_loss": valid_loss,
        "valid_accuracy": valid_acc,
    }


def _snapshot(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def fisher_information(model: nn.Module, data: Data, engine: Engine) -> dict[str, torch.Tensor]:
    """The original's batch-level empirical Fisher (reference §3.6), in eval mode.

    For each batch the gradient of the *summed* cross entropy is squared and accumulated, and the
    total is divided by the number of samples: F = (1/N) Σ_batches (∇ Σ_{i∈batch} ℓ_i)².
    Every trainable parameter gets an entry.
    """
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    fisher = {name: torch.zeros_like(p) for name, p in named}
    try:
        for start in range(0, len(data), engine.batch_size):
            x = scale_images(data.x[start : start + engine.batch_size].to(device), engine)
            y = data.y[start : start + engine.batch_size].to(device)
            model.zero_grad(set_to_none=True)
            F.cross_entropy(model(x).float(), y, reduction="sum").backward()
            for name, parameter in named:
                if parameter.grad is not None:
                    fisher[name] += parameter.grad.detach().pow(2)
        model.zero_grad(set_to_none=True)
    finally:
        model.train(was_training)
    return {name: value / len(data) for name, value in fisher.items()}


def parameters_of(model: nn.Module) -> dict[str, torch.Tensor]:
    """A detached copy of the model's parameters: an EWC anchor's θ_k."""
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def clone_model(model: nn.Module) -> nn.Module:
    """An independent copy (fits train in place; a tuner starts every trial from a copy)."""
    return copy.deepcopy(model)
