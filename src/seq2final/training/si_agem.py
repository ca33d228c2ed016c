"""The training-time parts of the continual methods Wild-Time compares: SI's path integral and
A-GEM's episodic memory and gradient projection.

Both change what one optimiser step does, so each is a fit callback
(:mod:`seq2final.training.callbacks`: :class:`PathTracking`, :class:`GradientProjection`) the
modes put on their tasks; everything that happens between steps of a sequence (SI's importance
update, filling the memory) is in the modes (:mod:`seq2final.methods.continual`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from seq2final.training.callbacks import FitCallback, FitState
from seq2final.training.engine import Engine, autocast, run_model, scale_images
from seq2final.training.flops import COUNTED_BATCH, counted_flops
from seq2final.training.tensors import TensorSplit


class PathIntegral:
    """SI's running ω (Zenke et al., 2017): the sum over optimiser updates of −g·Δθ per parameter,
    where g is the gradient the step used and Δθ the change it made.

    Wild-Time's SI adds to ω once per timestamp, at ``train_update_iter``:
    −g ⊙ (θ_end − θ_start), its last update's gradient times the whole timestamp's change
    (docs/fixes.md, Wild-Time); this sums every update's −g ⊙ Δθ, as the definition and van de
    Ven's code it adapts do. The gradient is that of the whole loss the optimiser descends (SI's
    surrogate term included), as in that code.
    """

    def __init__(self, named: Sequence[tuple[str, nn.Parameter]]) -> None:
        self.named = list(named)
        self.total = {name: torch.zeros_like(p, dtype=torch.float32) for name, p in self.named}
        self._before: list[torch.Tensor] = []
        self._grads: list[torch.Tensor | None] = []

    def before_update(self) -> None:
        """Remember the parameters and the (unscaled) gradients the next step will use."""
        self._before = [p.detach().clone() for _, p in self.named]
        self._grads = [None if p.grad is None else p.grad.detach().clone() for _, p in self.named]

    def after_update(self) -> None:
        """Add this step's −g·Δθ. A step a gradient scaler skipped (an inf or NaN gradient under
        ``amp: fp16``) moved nothing and adds nothing: non-finite gradients count as 0, so ω
        is never poisoned by inf·0."""
        for (name, p), before, grad in zip(self.named, self._before, self._grads, strict=True):
            if grad is not None:
                finite = torch.where(torch.isfinite(grad), grad, torch.zeros_like(grad))
                self.total[name] -= (finite * (p.detach() - before)).float()

    def snapshot(self) -> dict[str, torch.Tensor]:
        """ω so far, on the CPU (kept with the epoch it belongs to)."""
        return {name: value.detach().cpu().clone() for name, value in self.total.items()}


def project_conflicting(
    gradients: Sequence[torch.Tensor], reference: Sequence[torch.Tensor]
) -> None:
    """A-GEM's projection, in place: where the gradient ``g`` points against the memory's
    ``g_ref`` (g·g_ref < 0), replace it with g − (g·g_ref / g_ref·g_ref) g_ref, whose dot
    product with g_ref is 0, so a small step along it does not increase the memory's loss to
    first order; elsewhere leave it. Computed without a branch, so a GPU never waits on it."""
    dot = torch.stack([(g * r).sum() for g, r in zip(gradients, reference, strict=True)]).sum()
    norm = torch.stack([r.pow(2).sum() for r in reference]).sum()
    scale = dot.clamp(max=0) / norm.clamp(min=torch.finfo(norm.dtype).tiny)
    for g, r in zip(gradients, reference, strict=True):
        g.sub_(scale * r)


class EpisodicMemory:
    """A-GEM's memory during a fit: the stored images on the device, a reference batch drawn
    from them for every step, and the projection of the step's gradient against theirs."""

    def __init__(
        self, memory: TensorSplit, batch_size: int, engine: Engine, generator: torch.Generator
    ) -> None:
        self.memory, self.batch_size, self.engine = memory, batch_size, engine
        self.generator = generator

    def project(
        self,
        model: nn.Module,
        parameters: Sequence[nn.Parameter],
        scale: Callable[[torch.Tensor], torch.Tensor],
    ) -> None:
        """Project the parameters' gradients against the gradient of the memory's loss on a
        batch drawn from it, that loss scaled by ``scale`` as the step's own was (a gradient
        scaler's ``scale``), so both gradients are on one scale."""
        device = self.memory.y.device
        index = torch.randperm(len(self.memory), generator=self.generator, device=device)
        index = index[: self.batch_size]
        x = scale_images(self.memory.x[index], self.engine)
        with autocast(self.engine, device):
            logits = run_model(model, x, None)
        loss = scale(F.cross_entropy(logits.float(), self.memory.y[index]))
        reference = torch.autograd.grad(loss, list(parameters), allow_unused=True)
        pairs = [
            (p.grad, r) for p, r in zip(parameters, reference, strict=True)
            if p.grad is not None and r is not None
        ]  # fmt: skip
        project_conflicting([g for g, _ in pairs], [r for _, r in pairs])


class PathTracking(FitCallback):
    """SI's callback: tracks the path integral ω over every optimiser step (the gradients
    unscaled first) and keeps ω up to the selected epoch as ``extras["path_integral"]``."""

    def before_fit(self, fit_state: FitState) -> None:
        self.path = PathIntegral(
            [(n, p) for n, p in fit_state.model.named_parameters() if p.requires_grad]
        )

    def on_selected(self, fit_state: FitState) -> None:
        fit_state.extras["path_integral"] = self.path.snapshot()

    def before_update(self, fit_state: FitState) -> None:
        fit_state.unscale()
        self.path.before_update()

    def after_update(self, fit_state: FitState) -> None:
        self.path.after_update()


class GradientProjection(FitCallback):
    """A-GEM's callback: every step's gradient projected against the gradient of the episodic
    ``memory``'s loss on a reference batch of ``batch_size`` images drawn from it."""

    def __init__(self, memory: TensorSplit, batch_size: int) -> None:
        self.memory, self.batch_size = memory, batch_size

    def before_fit(self, fit_state: FitState) -> None:
        device = next(fit_state.model.parameters()).device
        self.episodic = EpisodicMemory(
            self.memory.to(device), self.batch_size, fit_state.engine, fit_state.generator
        )

    def after_backward(self, fit_state: FitState) -> None:
        self.episodic.project(fit_state.model, fit_state.parameters, fit_state.scale)

    def extra_train_flops(self, model: nn.Module, engine: Engine, updates: int) -> float:
        """Every step also takes a gradient on a reference batch of the memory."""
        device = next(model.parameters()).device
        size = min(COUNTED_BATCH, len(self.memory))
        x = scale_images(self.memory.x[:size].to(device), engine)
        y = self.memory.y[:size].to(device)

        def reference_step() -> None:
            with autocast(engine, device):
                loss = F.cross_entropy(run_model(model, x, None).float(), y)
            loss.backward()

        batch = min(self.batch_size, len(self.memory))
        return updates * batch * counted_flops(reference_step) / size
