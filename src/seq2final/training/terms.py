"""Loss terms: what a fit minimises, one registered class per term.

A fit's loss is its *objective* (how the per-domain losses of one step combine: ERM's sum, IRM's
penalised sum, DRO's worst domain, the joint models' mean, CORAL's pooled loss plus alignment)
plus its *penalties* (L2 on conv/linear weights in every fit, EWC's or SI's pull towards earlier
models, the joint models' adjacency term), each as in the original (docs/methods.md). Every one of them
is a :class:`LossTerm` registered in :data:`LOSS_TERMS` with :func:`loss_term`, exactly as a
user's term is (docs/extending.md):

* :meth:`LossTerm.domain_loss` adjusts one domain's mean loss (IRM adds its penalty there);
* :meth:`LossTerm.combine` turns the domains' losses into the data loss (objectives only);
* :meth:`LossTerm.penalty` adds a weighted term, or nothing when its weight is 0;
* ``hyperparameters``, a pydantic model, declares the values the term reads from the fit's
  hyper-parameters, with their defaults, ranges and default search space
  (:mod:`seq2final.training.hyperparameters`);
* ``fusable`` says whether the term is written for a fused stack (:mod:`seq2final.training.fused`),
  where values are per-model tensors and the term runs under ``vmap``.

Terms see one training step through a :class:`LossInputs`: the model, the batches, each domain's
logits, per-image losses and mean loss, and its penultimate features when a term asks for them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, TypeVar

import torch
import torch.nn.functional as F
from pydantic import BaseModel, Field
from torch import nn

from seq2final.core.errors import Seq2FinalError
from seq2final.core.registry import Registry
from seq2final.models import JointModel, squared_weight_norm, sum_of_squares
from seq2final.training.hyperparameters import HyperParameters, register_declaring


class NoHyperParameters(BaseModel):
    """The schema of a term that reads no hyper-parameter."""


@dataclass
class Batch:
    """One domain's batch: scaled images, labels, sample weights, the time step a joint model runs
    it at, and its weight in the joint loss (the paper's c_t; 1 elsewhere). A batch whose images
    were mixed with others (a batch transform: mixup) also carries the labels mixed in and the
    share of the first ones; ``drawn`` is what the objective drew for it outside the step (a fused
    stack draws each model's randomness from that model's generator)."""

    x: torch.Tensor
    y: torch.Tensor
    weight: torch.Tensor | None
    step: int | None
    loss_weight: float
    drawn: torch.Tensor | None = None
    mixed_y: torch.Tensor | None = None
    mix: torch.Tensor | None = None


@dataclass
class LossInputs:
    """One training step as terms see it: the model, the domains' batches and, per domain, the
    logits, the per-image losses (label-mixed where the batch was) and the mean loss after the
    objective's :meth:`LossTerm.domain_loss` and the domain's loss weight. ``features``: per
    domain, what the head's last linear layer sees (after the pool), filled only when a term of
    the fit declares ``uses_features`` (empty otherwise), from the pass that made the logits."""

    model: nn.Module
    batches: list[Batch]
    generator: torch.Generator | None
    logits: list[torch.Tensor] = field(default_factory=list)
    features: list[torch.Tensor] = field(default_factory=list)
    losses: list[torch.Tensor] = field(default_factory=list)
    domain_losses: list[torch.Tensor] = field(default_factory=list)


class LossTerm:
    """A part of a fit's loss; subclass it and register it with :func:`loss_term`.

    Override :meth:`combine` for an objective (one per fit) and :meth:`penalty` for a penalty
    (any number). An instance belongs to one task and may carry data (EWC's anchors).
    ``uses_features``: the fit computes each domain's penultimate features with its logits
    (:attr:`LossInputs.features`), in the same forward pass; a fit none of whose terms asks
    computes none.
    """

    name: ClassVar[str] = ""
    hyperparameters: ClassVar[type[BaseModel]] = NoHyperParameters
    fusable: ClassVar[bool] = True
    uses_features: ClassVar[bool] = False

    def domain_loss(
        self, inputs: LossInputs, index: int, loss: torch.Tensor, hp: HyperParameters
    ) -> torch.Tensor:
        """Domain ``index``'s mean loss as the objective counts it (before its loss weight)."""
        return loss

    def combine(self, inputs: LossInputs, hp: HyperParameters) -> torch.Tensor:
        """The data loss from ``inputs.domain_losses`` (objectives only)."""
        raise Seq2FinalError(f"loss term '{self.name}' is not an objective; it adds a penalty")

    def penalty(self, inputs: LossInputs, hp: HyperParameters) -> torch.Tensor | None:
        """The weighted penalty this term adds, or ``None`` when it adds nothing."""
        return None

    def draw(self, size: int, generator: torch.Generator) -> torch.Tensor | None:
        """Randomness a fused stack draws for one domain batch of ``size`` images from one
        model's generator, handed back as :attr:`Batch.drawn` (IRM's permutation)."""
        return None


def is_objective(term: type[LossTerm]) -> bool:
    """Whether a term class combines the domains' losses (it overrides :meth:`combine`)."""
    return term.combine is not LossTerm.combine


LOSS_TERMS: Registry[type[LossTerm]] = Registry("loss term")

T = TypeVar("T", bound=type[LossTerm])


def loss_term(name: str) -> Callable[[T], T]:
    """Register the decorated :class:`LossTerm` subclass as ``name``; its hyper-parameter schema
    is checked here, when the module (a plugin) is imported, before any work."""

    def register(cls: T) -> T:
        register_declaring(LOSS_TERMS, LossTerm, name, cls)
        return cls

    return register


def active(weight: float | torch.Tensor) -> bool:
    """Whether a penalty's weight switches it on: a non-zero number, or any tensor (a fused
    stack's per-model weights, where a zero weight multiplies the term away)."""
    return isinstance(weight, torch.Tensor) or bool(weight)


def at_least_float32(logits: torch.Tensor) -> torch.Tensor:
    """Logits for the loss: half-precision ones (autocast) in float32, others as they are (a
    float64 fit, as the exact comparisons in the tests run, stays float64)."""
    return logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits


# Objectives ----------------------------------------------------------------------------------


@loss_term("erm")
class Erm(LossTerm):
    """Empirical risk: the domains' losses summed."""

    def combine(self, inputs: LossInputs, hp: HyperParameters) -> torch.Tensor:
        return torch.stack(inputs.domain_losses).sum()


class IrmWeight(BaseModel):
    irm_penalty: float = Field(default=1.0, ge=0, json_schema_extra={"space": {"grid": [1.0], "low": 0.1, "high": 10.0, "log": True}})  # fmt: skip


@loss_term("irm")
class Irm(Erm):
    """IRM (Arjovsky et al., 2019) as the original code computes it: every domain's loss plus
    λ_IRM times its penalty (:func:`irm_penalty`), summed over the domains."""

    hyperparameters = IrmWeight

    def domain_loss(
        self, inputs: LossInputs, index: int, loss: torch.Tensor, hp: HyperParameters
    ) -> torch.Tensor:
        batch = inputs.batches[index]
        penalty = irm_penalty(inputs.logits[index], batch.y, inputs.generator, batch.drawn)
        return loss + hp.irm_penalty * penalty

    def draw(self, size: int, generator: torch.Generator) -> torch.Tensor:
        return torch.randperm(size, generator=generator, device=generator.device)


@loss_term("irm_v1")
class IrmV1(LossTerm):
    """IRMv1 as Wild-Time's IRM-T computes it: the domains' mean loss plus λ_IRM times the mean
    over the domains of :func:`irm_v1_penalty`. Wild-Time also keeps λ at 1 for its first
    ``irm_penalty_anneal_iters`` updates; here λ holds from the first."""

    hyperparameters = IrmWeight
    fusable = False  # the scalar dummy's gradients are not written for vmap

    def combine(self, inputs: LossInputs, hp: HyperParameters) -> torch.Tensor:
        penalties = [
            irm_v1_penalty(logits, batch.y)
            for logits, batch in zip(inputs.logits, inputs.batches, strict=True)
        ]
        mean_loss = torch.stack(inputs.domain_losses).mean()
        return mean_loss + hp.irm_penalty * torch.stack(penalties).mean()


@loss_term("dro")
class Dro(LossTerm):
    """Worst-domain DRO: only the worst domain's loss is back-propagated."""

    def combine(self, inputs: LossInputs, hp: HyperParameters) -> torch.Tensor:
        return torch.stack(inputs.domain_losses).max()


@loss_term("joint")
class Joint(LossTerm):
    """The joint models' loss: the mean over steps of each step's loss times its c_t."""

    def combine(self, inputs: LossInputs, hp: HyperParameters) -> torch.Tensor:
        return torch.stack(inputs.domain_losses).sum() / len(inputs.domain_losses)


class CoralWeight(BaseModel):
    coral: float = Field(default=0.0, ge=0, json_schema_extra={"space": {"grid": [0.9], "low": 0.01, "high": 10.0, "log": True}})  # fmt: skip


@loss_term("coral")
class Coral(LossTerm):
    """Wild-Time's CORAL-T formula: the cross-entropy over the batch's images pooled across the
    domains (each domain's mean loss weighted by its image count, so a window with more images in
    the batch counts more) plus λ_CORAL times the CORAL distance of their outputs
    (:func:`coral_penalty`). Each domain's logits come from its own forward pass (BatchNorm
    statistics per window, where Wild-Time forwards the mixed batch once: docs/fixes.md)."""

    hyperparameters = CoralWeight
    fusable = False  # its moments are not written for vmap

    def combine(self, inputs: LossInputs, hp: HyperParameters) -> torch.Tensor:
        losses = torch.stack(inputs.domain_losses)
        sizes = torch.tensor(
            [len(batch.y) for batch in inputs.batches], dtype=losses.dtype, device=losses.device
        )
        pooled = (losses * sizes).sum() / sizes.sum()
        return pooled + hp.coral * coral_penalty(inputs.logits)


def irm_penalty(
    logits: torch.Tensor,
    y: torch.Tensor,
    generator: torch.Generator | None = None,
    order: torch.Tensor | None = None,
) -> torch.Tensor:
    """The original's IRM penalty on one domain batch (docs/methods.md, IRM).

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


def irm_v1_penalty(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Wild-Time's IRMv1 penalty on one domain batch: the logits scaled by one scalar dummy
    ``s = 1``, and the product of the gradients w.r.t. ``s`` of the mean loss over the even- and
    the odd-indexed images, in batch order (the batch is drawn at random)."""
    scale = torch.ones((), device=logits.device, requires_grad=True)
    losses = F.cross_entropy(at_least_float32(logits) * scale, y, reduction="none")
    (g1,) = torch.autograd.grad(losses[0::2].mean(), [scale], create_graph=True)
    (g2,) = torch.autograd.grad(losses[1::2].mean(), [scale], create_graph=True)
    return g1 * g2


def _irm_penalty_functional(shuffled: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    def half_loss(scale: torch.Tensor, half: int) -> torch.Tensor:
        return F.cross_entropy(shuffled[half::2] * scale, labels[half::2])

    ones = torch.ones(shuffled.shape[-1], device=shuffled.device)
    return (torch.func.grad(half_loss)(ones, 0) * torch.func.grad(half_loss)(ones, 1)).sum()


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


# Penalties -----------------------------------------------------------------------------------


class L2Weight(BaseModel):
    weight_decay: float = Field(default=0.0, ge=0, json_schema_extra={"space": {"grid": [1.0e-4, 1.0e-2], "low": 1.0e-5, "high": 1.0e-2, "log": True}})  # fmt: skip


@loss_term("l2")
class L2(LossTerm):
    """The original's L2 penalty, in every fit: λ times the squared conv/linear weights (BN
    excluded; a joint model sums the modules each step uses), added to the loss rather than
    given to Adam as ``weight_decay``."""

    hyperparameters = L2Weight

    def penalty(self, inputs: LossInputs, hp: HyperParameters) -> torch.Tensor | None:
        if not active(hp.weight_decay):
            return None
        model = inputs.model
        norm = model.param_norm() if isinstance(model, JointModel) else squared_weight_norm(model)
        return hp.weight_decay * norm


Anchor = tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]
"""An earlier model's parameters and their weights in the pull towards them: EWC's (θ_k, F_k),
SI's (θ_{t−1}, Ω)."""


class AnchorPull(LossTerm):
    """A pull towards earlier models: λ Σ_k Σ F_k ⊙ (θ − θ_k)² (:func:`anchor_penalty`), λ the
    hyper-parameter the subclass declares. A chain that leaves one (EWC, SI) is continued on
    the final step under the same pull."""

    def __init__(self, anchors: Sequence[Anchor] = ()) -> None:
        self.anchors = list(anchors)

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        declared = len(cls.hyperparameters.model_fields)
        if declared != 1:
            raise Seq2FinalError(
                f"pull {cls.__name__}: a pull declares exactly one hyper-parameter, its weight; "
                f"it declares {declared}"
            )

    @classmethod
    def weight_name(cls) -> str:
        [name] = cls.hyperparameters.model_fields
        return name

    def penalty(self, inputs: LossInputs, hp: HyperParameters) -> torch.Tensor | None:
        weight = hp[self.weight_name()]
        if not (active(weight) and self.anchors):
            return None
        return weight * anchor_penalty(inputs.model, self.anchors)


class EwcWeight(BaseModel):
    ewc_lambda: float = Field(default=0.0, ge=0, json_schema_extra={"space": {"grid": [1.0e-4, 1.0e-2], "low": 1.0e-5, "high": 1.0, "log": True}})  # fmt: skip


@loss_term("ewc")
class Ewc(AnchorPull):
    """EWC (Kirkpatrick et al., 2017) as the original: λ_EWC Σ_k Σ F_k (θ − θ_k)² over every
    earlier step k, F_k its empirical Fisher (:func:`fisher_information`)."""

    hyperparameters = EwcWeight


class SiWeight(BaseModel):
    si_c: float = Field(default=0.0, ge=0, json_schema_extra={"space": {"grid": [0.1], "low": 1.0e-3, "high": 10.0, "log": True}})  # fmt: skip


@loss_term("si")
class Si(AnchorPull):
    """SI's surrogate loss (Zenke et al., 2017): c Σ Ω (θ − θ_{t−1})², Ω its importance."""

    hyperparameters = SiWeight


def pull_towards(weight: str, anchors: Sequence[Anchor]) -> AnchorPull:
    """The registered pull whose weight is the hyper-parameter ``weight`` (a stored chain names
    its pull by its weight: ``ewc_lambda``, ``si_c``), holding ``anchors``."""
    pulls = {
        cls.weight_name(): cls
        for cls in LOSS_TERMS.values()
        if issubclass(cls, AnchorPull) and len(cls.hyperparameters.model_fields) == 1
    }
    if weight not in pulls:
        raise Seq2FinalError(f"unknown pull weight '{weight}'; valid: {', '.join(pulls)}")
    return pulls[weight](anchors)


class AdjacencyWeight(BaseModel):
    adjacency: float = Field(default=0.0, ge=0, json_schema_extra={"space": {"grid": [0.01, 0.1, 1.0], "low": 1.0e-3, "high": 10.0, "log": True}})  # fmt: skip


@loss_term("adjacency")
class Adjacency(LossTerm):
    """The joint models' λ_adj Σ_t ||θ_t − θ_{t−1}||² over adjacent steps' modules."""

    hyperparameters = AdjacencyWeight

    def penalty(self, inputs: LossInputs, hp: HyperParameters) -> torch.Tensor | None:
        if not (active(hp.adjacency) and isinstance(inputs.model, JointModel)):
            return None
        return hp.adjacency * inputs.model.adjacency_norm()


def anchor_penalty(model: nn.Module, anchors: Sequence[Anchor]) -> torch.Tensor:
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


def resolve(term: str | LossTerm) -> LossTerm:
    """A term instance from a registered name (terms without data) or the instance itself."""
    return LOSS_TERMS[term]() if isinstance(term, str) else term


def schemas(terms: Sequence[LossTerm | type[LossTerm]]) -> list[tuple[str, type[BaseModel]]]:
    """Each term's hyper-parameter schema, named for messages."""
    return [(f"loss term '{t.name}'", t.hyperparameters) for t in terms]
