"""The fit rules: which epoch a fit keeps and when it stops, in one place.

Both the single fit (:func:`seq2final.training.loop.fit`) and every model of a fused stack
(:func:`seq2final.training.fused.fit_fused`) follow these rules, as the original code did
(docs/methods.md, "The fit loop"):

* epoch 0 is the initial model, evaluated before any step, and eligible for selection;
* the epoch with the strictly highest validation accuracy is kept (the earliest wins ties);
* training stops after ``patience`` consecutive epochs whose validation accuracy is not above the
  previous epoch's (the original's "more than 5" is ``patience: 6``), or at ``max_epochs``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class Selection:
    """The selected epoch and the stall count of one fit, updated once per validated epoch."""

    patience: int
    best_accuracy: float = -math.inf
    best_epoch: int = 0
    previous_accuracy: float = -math.inf
    stalls: int = 0

    def observe(self, epoch: int, accuracy: float) -> bool:
        """Take epoch ``epoch``'s validation accuracy; whether it is now the selected epoch."""
        selected = epoch == 0 or accuracy > self.best_accuracy
        if selected:
            self.best_accuracy, self.best_epoch = accuracy, epoch
        if epoch > 0:
            self.stalls = 0 if accuracy > self.previous_accuracy else self.stalls + 1
        self.previous_accuracy = accuracy
        return selected

    @property
    def stopped(self) -> bool:
        """Patience is exhausted: the fit trains no further epoch."""
        return self.stalls >= self.patience
