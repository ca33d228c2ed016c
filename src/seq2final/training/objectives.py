"""Objectives: what one fit minimises, from per-domain batches to a loss with its penalties.

Every method trains through the same loop (:mod:`seq2final.training.loop`); what differs is the
*objective* (how a list of per-domain batches becomes a loss: ERM, IRM, DRO, the joint models'
weighted sum) and the penalties added to it (L2 on conv/linear weights, EWC towards earlier
models, the joint models' adjacency term), each as in the original (reference §3).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from seq2final.core.errors import Seq2FinalError
from seq2final.models import JointModel, squared_weight_norm, sum_of_squares
from seq2final.training.engine import Engine, run_model, scale_images
from seq2final.training.tensors import TensorSplit

OBJECTIVES = ("erm", "irm", "dro", "joint", "coral")
MIXINGS = ("mixup", "lisa")
ANCHOR_WEIGHTS = ("ewc_lambda", "si_c")


@dataclass
class Task:
    """What one fit trains: data, objective and the non-searched parts of the loss.

    ``steps`` gives, per training domain, the time index a joint model runs it at (``None`` for a
    plain model); ``valid_step`` likewise for the validation set. ``step_weights`` are the joint
    loss's c_t. ``anchors`` are (parameters, weights) pairs of earlier models the loss pulls
    towards, weighted by the hyper-parameter ``anchor_weight`` names: EWC's (θ_k, F_k) under
    ``ewc_lambda``, SI's (θ_{t−1}, Ω) under ``si_c``. ``track_path`` asks the fit for SI's path
    integral; ``memory`` is A-GEM's episodic memory, against which every step's gradient is
    projected using a reference batch of ``memory_batch`` images.
    """

    domains: list[TensorSplit]
    valid: TensorSplit
    objective: str = "erm"
    steps: list[int | None] | None = None
    valid_step: int | None = None
    step_weights: list[float] | None = None
    trainable: Sequence[str] | None = None
    anchors: list[tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]] = field(
        default_factory=list
    )
    mixing: str | None = None
    mix_alpha: float = 2.0
    anchor_weight: str = "ewc_lambda"
    track_path: bool = False
    memory: TensorSplit | None = None
    memory_batch: int = 32

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise Seq2FinalError(
                f"unknown objective '{self.objective}'; valid: {', '.join(OBJECTIVES)}"
            )
        if self.mixing is not None and self.mixing not in MIXINGS:
            raise Seq2FinalError(f"unknown mixing '{self.mixing}'; valid: {', '.join(MIXINGS)}")
        if self.anchor_weight not in ANCHOR_WEIGHTS:
            raise Seq2FinalError(
                f"unknown anchor weight '{self.anchor_weight}'; valid: {', '.join(ANCHOR_WEIGHTS)}"
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
    coral: float = 0.0
    si_c: float = 0.0

    @classmethod
    def from_dict(cls, values: dict[str, float]) -> HyperParameters:
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(values) - known)
        if unknown:
            raise Seq2FinalError(
                f"unknown hyper-parameter(s) {', '.join(unknown)}; valid: {', '.join(sorted(known))}"
            )
        return cls(**{k: float(v) for k, v in values.items()})


def at_least_float32(logits: torch.Tensor) -> torch.Tensor:
    """Logits for the loss: half-precision ones (autocast) in float32, others as they are (a
    float64 fit, as the exact comparisons in the tests run, stays float64)."""
    return logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits


def penalty_norm(model: nn.Module) -> torch.Tensor:
    """The L2 term: squared conv/linear weights (a joint model sums the modules each step uses)."""
    if isinstance(model, JointModel):
        return model.param_norm()
    return squared_weight_norm(model)


def irm_penalty(
    logits: torch.Tensor,
    y: torch.Tensor,
    generator: torch.Generator | None = None,
    order: torch.Tensor | None = None,
) -> torch.Tensor:
    """The original's IRM penalty on one domain batch (reference §3.3).

    Logits are scaled by a per-class dummy vector ``w = 1``; the samples are permuted, and the
    penalty is the dot product of the gradients w.r.t. ``w`` of the mean loss over the even- and
    the odd-indexed halves. The graph is kept so the penalty back-propagates into the model.
    A single fit draws the permutation from ``generator``; a fused stack passes each model's
    ``order`` and runs under ``vmap``, where the gradients are taken with :func:`torch.func.grad`
    (the same values; its backward sums in another order, so a fused IRM fit matches a single
    one to float tolerance rather than bit for bit).
    """
    if order is not None:
        return _irm_penalty_functional(at_least_float32(logits)[order], y[order])
    if generator is None:
        raise ValueError("irm_penalty needs a generator or an order")
    scale = torch.ones(logits.shape[1], device=logits.device, requires_grad=True)
    order = torch.randperm(len(y), generator=generator, device=generator.device)
    scaled, labels = at_least_float32(logits)[order] * scale, y[order]
    first = F.cross_entropy(scaled[0::2], labels[0::2])
    second = F.cross_entropy(scaled[1::2], labels[1::2])
    (g1,) = torch.autograd.grad(first, [scale], create_graph=True)
    (g2,) = torch.autograd.grad(second, [scale], create_graph=True)
    return (g1 * g2).sum()


def _irm_penalty_functional(shuffled: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    def half_loss(scale: torch.Tensor, half: int) -> torch.Tensor:
        return F.cross_entropy(shuffled[half::2] * scale, labels[half::2])

    ones = torch.ones(shuffled.shape[-1], device=shuffled.device)
    return (torch.func.grad(half_loss)(ones, 0) * torch.func.grad(half_loss)(ones, 1)).sum()


def ewc_penalty(
    model: nn.Module, anchors: Sequence[tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]]
) -> torch.Tensor:
    """Σ_k Σ F_k ⊙ (θ − θ_k)² over every earlier model k (no ½, as in the original); with SI's
    single anchor (θ_{t−1}, Ω) this is SI's surrogate loss Σ Ω ⊙ (θ − θ_{t−1})²."""
    parameters = dict(model.named_parameters())
    terms = []
    for values, fisher in anchors:
        names = [name for name in parameters if name in fisher]
        if names:
            terms.append(sum_of_squares(
                [parameters[name] for name in names],
                minus=[values[name] for name in names],
                weights=[fisher[name] for name in names],
            ))  # fmt: skip
    if not terms:
        return torch.zeros((), device=next(model.parameters()).device)
    return torch.stack(terms).sum()


def coral_penalty(features: Sequence[torch.Tensor]) -> torch.Tensor:
    """CORAL between every pair of domains, averaged over the pairs: the mean squared difference
    of their means plus that of their (unbiased) covariances, computed on the outputs as
    Wild-Time's CORAL does."""
    moments = []
    for output in features:
        output = at_least_float32(output)
        mean = output.mean(0)
        centred = output - mean
        moments.append((mean, centred.T @ centred / max(1, len(output) - 1)))
    pairs = [
        (moments[i], moments[j]) for i in range(len(moments)) for j in range(i + 1, len(moments))
    ]
    if not pairs:
        return torch.zeros((), device=features[0].device)
    return torch.stack([
        (m1 - m2).pow(2).mean() + (c1 - c2).pow(2).mean() for (m1, c1), (m2, c2) in pairs
    ]).mean()  # fmt: skip


@dataclass
class Batch:
    """One domain's batch: scaled images, labels, sample weights, the time step a joint model runs
    it at, and its weight in the joint loss (the paper's c_t; 1 elsewhere). A mixup batch also
    carries the labels of the images mixed in and the mixing weight of the first ones."""

    x: torch.Tensor
    y: torch.Tensor
    weight: torch.Tensor | None
    step: int | None
    loss_weight: float
    irm_order: torch.Tensor | None = None  # IRM's permutation, when drawn outside (fused fits)
    mixed_y: torch.Tensor | None = None
    mix: torch.Tensor | None = None


def objective_loss(
    model: nn.Module,
    batches: list[Batch],
    task: Task,
    hp: HyperParameters,
    generator: torch.Generator | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """The objective's loss; also its summed CE and correct count (detached tensors on the
    device, read once per epoch by the loop, never per batch) and its sample count."""
    ce_terms, count = [], 0
    device = batches[0].x.device
    ce_sum = torch.zeros((), dtype=torch.float64, device=device)  # double, as a Python sum was
    correct = torch.zeros((), dtype=torch.int64, device=device)
    penalties = torch.zeros((), device=device)
    outputs = []
    for batch in batches:
        logits = run_model(model, batch.x, batch.step)
        outputs.append(logits)
        losses = F.cross_entropy(at_least_float32(logits), batch.y, reduction="none")  # once
        if batch.mixed_y is not None:  # mixup: the loss of each label, by its share of the image
            other = F.cross_entropy(at_least_float32(logits), batch.mixed_y, reduction="none")
            losses = batch.mix * losses + (1 - batch.mix) * other
        ce = (losses if batch.weight is None else losses * batch.weight).mean()
        if task.objective == "irm":
            penalty = irm_penalty(logits, batch.y, generator, batch.irm_order)
            ce = ce + hp.irm_penalty * penalty
        ce_terms.append(ce * batch.loss_weight)
        with torch.no_grad():
            ce_sum = ce_sum + losses.detach().sum()
            correct = correct + (logits.argmax(1) == batch.y).sum()
            count += len(batch.y)
    if task.objective == "dro":
        # Only the worst domain's loss is back-propagated; the others are discarded.
        data_loss = torch.stack(ce_terms).max()
    elif task.objective == "joint":
        data_loss = torch.stack(ce_terms).sum() / len(ce_terms)
    elif task.objective == "coral":  # the domains' mean loss, their outputs' moments aligned
        data_loss = torch.stack(ce_terms).mean() + hp.coral * coral_penalty(outputs)
    else:
        data_loss = torch.stack(ce_terms).sum()
    if _active(hp.weight_decay):
        penalties = penalties + hp.weight_decay * penalty_norm(model)
    anchor_weight = getattr(hp, task.anchor_weight)
    if _active(anchor_weight) and task.anchors:
        penalties = penalties + anchor_weight * ewc_penalty(model, task.anchors)
    if _active(hp.adjacency) and isinstance(model, JointModel):
        penalties = penalties + hp.adjacency * model.adjacency_norm()
    return data_loss + penalties, ce_sum, correct, count


def _active(weight: float | torch.Tensor) -> bool:
    """Whether a penalty's weight switches it on: a non-zero number, or any tensor (a fused
    stack's per-model weights, where a zero weight multiplies the term away)."""
    return isinstance(weight, torch.Tensor) or bool(weight)


def fisher_information(
    model: nn.Module, data: TensorSplit, engine: Engine
) -> dict[str, torch.Tensor]:
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
