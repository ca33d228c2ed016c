"""Test-set metrics of a fitted model.

The paper reports top-1 accuracy only; a researcher comparing methods also wants to know whether a
method buys accuracy by sacrificing a class (worst-class accuracy) or by becoming over-confident
(NLL and expected calibration error), so every result record carries all four.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

ECE_BINS = 15


def classification_metrics(logits: torch.Tensor, labels: torch.Tensor) -> dict[str, float]:
    """Accuracy, worst-class accuracy (over classes present), mean NLL and 15-bin ECE."""
    logits, labels = logits.float().cpu(), labels.cpu()
    predictions = logits.argmax(1)
    correct = (predictions == labels).float()
    per_class = [float(correct[labels == c].mean()) for c in torch.unique(labels).tolist()]
    return {
        "accuracy": float(correct.mean()),
        "worst_class_accuracy": min(per_class),
        "nll": float(F.cross_entropy(logits, labels)),
        "ece": expected_calibration_error(logits.softmax(1), labels),
    }


def expected_calibration_error(
    probabilities: torch.Tensor, labels: torch.Tensor, bins: int = ECE_BINS
) -> float:
    """Σ_b |B_b|/N · |accuracy(B_b) − confidence(B_b)| over equal-width confidence bins."""
    confidence, predictions = probabilities.max(1)
    correct = (predictions == labels).float()
    edges = torch.linspace(0, 1, bins + 1)
    total = 0.0
    for low, high in zip(edges[:-1], edges[1:], strict=True):
        inside = (confidence > low) & (confidence <= high)
        if inside.any():
            gap = correct[inside].mean() - confidence[inside].mean()
            total += float(inside.float().mean() * gap.abs())
    return total
