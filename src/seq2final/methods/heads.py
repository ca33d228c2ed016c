"""NED's heads on a historical model's features: nearest class mean (``ncm``) and Prototype
Tuning (``proto_tune``), as final modes (docs/representations.md).

NED (Wallingford et al.) finds that a head set from the class means of a good representation's
features rivals fine-tuning at a small share of its compute. Both heads are *linear* heads of
the architecture's own ``fc``, so their model is an ordinary model of the run's architecture
(stored, scored and continued like any other):

- nearest class mean by Euclidean distance, argmin_c ‖f − m_c‖², is argmax_c (m_c·f − ½‖m_c‖²):
  weights m_c, biases −½‖m_c‖²;
- by cosine distance, argmax_c m_c·f / (‖m_c‖ ‖f‖), whose ‖f‖ is the same for every class, is
  argmax_c (m_c/‖m_c‖)·f: weights the unit means, no bias.

Under either metric the decisions are the nearest class mean's exactly (NED's own metric is
cosine, ``metric: cosine``; Euclidean is the default, docs/fixes.md); the probabilities are
softmax(−½ d²) for Euclidean and softmax(‖f‖ cos) for cosine, where NED's Eq. 1 writes
softmax(−d), which changes the test NLL and calibration but no prediction. Prototype Tuning starts from the Euclidean head (NED's Table 7:
its linear classifier initialised from the class means is the variant that works) and tunes
``fc`` alone, the features frozen, as NED's fine-tuning does.

Written on the public API alone (:mod:`seq2final.methods`, :mod:`seq2final.training`), as a
plugin would be (docs/extending.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import torch
from torch import nn

from seq2final.core.errors import Seq2FinalError
from seq2final.core.schema import StrictModel
from seq2final.methods.blocks import settings_of, space_of
from seq2final.methods.context import Context
from seq2final.methods.final import continue_chains, stage_name
from seq2final.methods.modes import FinalOutcome, HistoricalState, ModelChain, final_mode, method
from seq2final.training import Engine, Task, TensorSplit, clone_model, layer_inputs

ABSENT_LOGIT = -1.0e9
"""The bias of a class the final step's training split has no image of: never predicted."""


def _linear_head(model: nn.Module) -> nn.Linear | None:
    head = getattr(getattr(model, "fc", None), "linear", None)
    return head if isinstance(head, nn.Linear) else None


def has_linear_head(model: nn.Module) -> bool:
    """Whether ``model``'s head ends in ``fc.linear``, where the head modes read features."""
    return _linear_head(model) is not None


def head_of(model: nn.Module) -> nn.Linear:
    """The linear layer a head mode sets: ``fc.linear`` of a block model."""
    head = _linear_head(model)
    if head is None:
        raise Seq2FinalError(
            f"a head mode needs a model whose head ends in fc.linear (a block model); "
            f"got {type(model).__name__}"
        )
    return head


def features(model: nn.Module, data: TensorSplit, engine: Engine) -> torch.Tensor:
    """The features ``model``'s last linear layer sees for every image of ``data`` (eval mode,
    on the CPU): the input of ``fc.linear``, after the pool (and DenseNet's norm)."""
    return layer_inputs(model, head_of(model), data, engine).float().cpu()


def class_means(
    feats: torch.Tensor, labels: torch.Tensor, num_classes: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each class's mean feature and whether the class has any image (a C×D and a C tensor)."""
    labels = labels.cpu().long()
    counts = torch.bincount(labels, minlength=num_classes).to(feats.dtype)
    sums = torch.zeros(num_classes, feats.shape[1], dtype=feats.dtype).index_add_(0, labels, feats)
    present = counts > 0
    return sums / counts.clamp(min=1).unsqueeze(1), present


def imprint(model: nn.Module, means: torch.Tensor, present: torch.Tensor, metric: str) -> None:
    """Set ``model``'s linear head to nearest-class-mean decisions under ``metric`` (above)."""
    linear = head_of(model)
    if metric == "euclidean":
        weight, bias = means, -0.5 * (means * means).sum(1)
    else:
        weight = means / means.norm(dim=1, keepdim=True).clamp(min=1e-12)
        bias = torch.zeros(len(means), dtype=means.dtype)
    weight = torch.where(present.unsqueeze(1), weight, torch.zeros_like(weight))
    bias = torch.where(present, bias, torch.full_like(bias, ABSENT_LOGIT))
    with torch.no_grad():
        linear.weight.copy_(weight.to(linear.weight))
        linear.bias.copy_(bias.to(linear.bias))


def min_cosine_distance(
    feats: torch.Tensor, means: torch.Tensor, present: torch.Tensor
) -> torch.Tensor:
    """Each feature's cosine distance to its nearest class mean (classes with images only): NED's
    minimum distance, the score its MDT thresholds to tell unseen images from seen ones."""
    unit = means[present] / means[present].norm(dim=1, keepdim=True).clamp(min=1e-12)
    cos = feats / feats.norm(dim=1, keepdim=True).clamp(min=1e-12) @ unit.T
    return 1.0 - cos.max(1).values


def detection_auroc(
    model: nn.Module,
    reference: TensorSplit,
    seen: TensorSplit,
    shifted: TensorSplit,
    engine: Engine,
    num_classes: int,
) -> float:
    """NED's minimum-distance detection as a shift score: the AUROC of telling ``shifted``
    images from ``seen`` ones by their minimum cosine distance to the class means of
    ``reference`` in ``model``'s features (0.5: indistinguishable; 1: every shifted image
    farther than every seen one)."""
    means, present = class_means(features(model, reference, engine), reference.y, num_classes)
    scores = torch.cat([min_cosine_distance(features(model, split, engine), means, present)
                        for split in (seen, shifted)])  # fmt: skip
    labels = [0] * len(seen) + [1] * len(shifted)
    from sklearn.metrics import roc_auc_score  # lazy: see docs/architecture.md, "Start-up"

    return float(roc_auc_score(labels, scores.double().numpy()))


def nearest_mean_model(ctx: Context, chain: ModelChain, metric: str, stage: str) -> nn.Module:
    """The chain's last model with its head set from the class means of the final step's
    training images, its cost and validation accuracy recorded as a closed-form fit."""
    train, valid = ctx.split(-1, "train"), ctx.split(-1, "valid")
    model = clone_model(chain.last).to(ctx.device)
    imprint(model, *class_means(features(model, train, ctx.engine), train.y, ctx.num_classes),
            metric)  # fmt: skip
    ctx.closed_form_fit(stage, model, valid, forward_images=len(train))
    return model


class NcmSettings(StrictModel):
    """``ncm``'s distance to the class means: Euclidean by default, the head Prototype Tuning
    starts from; ``cosine`` is what NED uses for all its methods (docs/fixes.md, NCM's distance)."""

    metric: Literal["euclidean", "cosine"] = "euclidean"


@final_mode(
    "ncm",
    "a nearest-class-mean head on the historical model's features (NED's NCM): no training",
    ("model",),
    config_keys=(),
    settings=NcmSettings,
)
def _ncm(ctx: Context, config: Mapping[str, Any], state: HistoricalState | None) -> FinalOutcome:
    assert state is not None
    metric = settings_of(NcmSettings, config).metric
    return continue_chains(
        ctx, state, lambda name, chain: nearest_mean_model(ctx, chain, metric, stage_name(name, "ncm")),
        None,
    )  # fmt: skip


@final_mode(
    "proto_tune",
    "a linear head set from the class means, then tuned alone (NED's Prototype Tuning)",
    ("model",),
)
def _proto_tune(
    ctx: Context, config: Mapping[str, Any], state: HistoricalState | None
) -> FinalOutcome:
    """The head tuned alone from the class-mean head. Under the default
    ``training.freeze_bn_stats: false`` the frozen body's BatchNorm layers normalise by each
    batch and their statistics move during the fit (as the loop lets every frozen layer's), so
    its features differ from epoch to epoch and are computed anew each time; caching them would
    change the result. With ``freeze_bn_stats: true`` a trial without dropout or augmentation
    computes them once and trains the head on them, the same fit
    (:mod:`seq2final.training.features`, through :meth:`Context.tuned_fit`)."""
    assert state is not None
    train, valid = ctx.split(-1, "train"), ctx.split(-1, "valid")
    space = space_of(config, "space")

    def fit_chain(name: str, chain: ModelChain) -> nn.Module:
        start = nearest_mean_model(ctx, chain, "euclidean", stage_name(name, "prototypes"))
        task = Task([train], valid, trainable=["fc"], penalties=[chain.pull()])
        return ctx.tuned_fit(stage_name(name, "head"), space, lambda: clone_model(start), task)

    return continue_chains(ctx, state, fit_chain, None)


method("ncm", "erm", "ncm", "NCM", citation="NED, Wallingford et al.; on ERM's features")
method("proto_tune", "erm", "proto_tune", "ProtoTune", citation="NED, Wallingford et al.")
