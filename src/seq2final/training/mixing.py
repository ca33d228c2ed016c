"""Mixing a training batch with other images: mixup and LISA's intra-label mixing.

*mixup* (Zhang et al., 2018) mixes each batch with a permutation of itself, one weight
λ ~ Beta(α, α) per batch, and weighs the two labels' losses by λ and 1 − λ. *LISA*'s intra-label
variant (Yao et al., 2022) mixes every image with another image *of the same label*, drawn from
the whole training domain, one λ ~ Beta(α, α) per image; the label is unchanged. Both mix the
images as the model sees them (scaled floats), as Wild-Time does on Yearbook.

λ is drawn from torch's global generator, which every fit seeds, and partners and permutations
from the fit's own generator, so a fit with mixing is as reproducible as one without.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from seq2final.core.errors import Seq2FinalError
from seq2final.training.callbacks import FitCallback, FitState
from seq2final.training.engine import Engine, scale_images
from seq2final.training.tensors import TensorSplit
from seq2final.training.terms import Batch

MIXINGS = ("mixup", "lisa")


class Mixer:
    """Mixes batches of one training domain (``kind``: ``mixup`` or ``lisa``)."""

    def __init__(self, kind: str, alpha: float, domain: TensorSplit, engine: Engine) -> None:
        if alpha <= 0:
            raise Seq2FinalError(f"mix_alpha {alpha}: valid: a positive Beta concentration")
        self.kind, self.domain, self.engine = kind, domain, engine
        concentration = torch.tensor(float(alpha), device=domain.y.device)
        self.beta = torch.distributions.Beta(concentration, concentration)
        # LISA's partners: the domain's indices sorted by label, and where each label starts
        self.by_label = torch.argsort(domain.y, stable=True)
        self.counts = torch.bincount(domain.y)
        self.starts = torch.cumsum(self.counts, 0) - self.counts

    def partners(self, labels: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """For each label, the index of a uniformly drawn image of the domain with that label."""
        draws = torch.rand(len(labels), generator=generator, device=generator.device)
        offsets = (draws.to(labels.device) * self.counts[labels]).long()
        return self.by_label[self.starts[labels] + offsets]

    def __call__(
        self, x: torch.Tensor, y: torch.Tensor, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """The mixed images, and for mixup the labels mixed in and λ (``None`` for LISA)."""
        if self.kind == "mixup":
            mix = self.beta.sample().to(x.dtype)
            order = torch.randperm(len(y), generator=generator, device=generator.device)
            order = order.to(y.device)
            return mix * x + (1 - mix) * x[order], y[order], mix
        partner = scale_images(self.domain.x[self.partners(y, generator)], self.engine)
        mix = self.beta.sample((len(y),)).to(x.dtype).view(-1, *([1] * (x.dim() - 1)))
        return mix * x + (1 - mix) * partner, None, None


class BatchMixing(FitCallback):
    """Mixes every training batch before the forward pass (``kind``: ``mixup`` or ``lisa``, with
    Beta concentration ``alpha``), one :class:`Mixer` per training domain."""

    def __init__(self, kind: str, alpha: float) -> None:
        if kind not in MIXINGS:
            raise Seq2FinalError(f"unknown mixing '{kind}'; valid: {', '.join(MIXINGS)}")
        self.kind, self.alpha = kind, alpha

    def before_fit(self, fit_state: FitState) -> None:
        self.mixers = [Mixer(self.kind, self.alpha, d, fit_state.engine) for d in fit_state.domains]

    def transform_batch(self, fit_state: FitState, domain: int, batch: Batch) -> Batch:
        x, mixed_y, mix = self.mixers[domain](batch.x, batch.y, fit_state.generator)
        return replace(batch, x=x, mixed_y=mixed_y, mix=mix)
