"""How alike two models' representations are: SVCCA (Appendix G.2, Raghu et al. 2017)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from threadpoolctl import threadpool_limits
from torch import nn

from seq2final.models import JointModel, layer_names
from seq2final.reporting.projection import WHOLE_MODEL
from seq2final.training.engine import Engine, scale_images
from seq2final.training.tensors import TensorSplit


@torch.no_grad()
def layer_activations(
    model: nn.Module, data: TensorSplit, engine: Engine, step: int | None
) -> dict[str, np.ndarray]:
    """Every named layer's output on ``data`` in eval mode, shaped for SVCCA, plus the whole model.

    A convolutional output N×C×H×W becomes (N·H·W)×C: each position is a data point of the same C
    neurons (Raghu et al.'s treatment of conv layers), which keeps the neurons few and the points
    many. The head's logits (before softmax) are N×classes. The whole model concatenates, per
    image, every conv layer's channels averaged over positions and the logits. The model is moved
    to the engine's device and runs there; the activations come back to the CPU for the SVD.
    """
    device = engine.torch_device()  # the run's device: the forward passes are the cost here
    model.to(device)
    was_training = model.training
    model.eval()
    x = scale_images(data.x.to(device), engine)
    outputs: dict[str, torch.Tensor] = {}
    try:
        for name in layer_names(model):
            if isinstance(model, JointModel):
                assert step is not None
                x = model.layer_output(name, x, step)
            else:
                x = getattr(model, name)(x)
            outputs[name] = x.float().cpu()
    finally:
        model.train(was_training)
    shaped = {
        name: out.permute(0, 2, 3, 1).reshape(-1, out.shape[1]).double().numpy()
        if out.dim() == 4
        else out.reshape(len(out), -1).double().numpy()
        for name, out in outputs.items()
    }
    pooled = [out.mean(dim=(2, 3)) if out.dim() == 4 else out for out in outputs.values()]
    shaped[WHOLE_MODEL] = torch.cat(pooled, dim=1).double().numpy()
    return shaped


@dataclass(frozen=True)
class _Reduced:
    """One side of an SVCCA comparison: centred activations and the eigendecomposition of their
    Gram matrix XᵀX (energies descending; its non-zero part when X has fewer rows than columns),
    computed once however many cut-offs and partners."""

    centred: np.ndarray
    energy: np.ndarray
    vectors: np.ndarray

    @classmethod
    def of(cls, activations: np.ndarray) -> _Reduced:
        centred = activations - activations.mean(axis=0)
        points, neurons = centred.shape
        if points < neurons:
            # Fewer points than neurons (the whole model's ~1000 pooled channels on a few
            # hundred images): XᵀX has rank below n, and the thin SVD of X (O(n²d)) gives its
            # non-zero eigenpairs, σ² and V, without the d×d eigendecomposition (O(d³)).
            _, singular, rows = np.linalg.svd(centred, full_matrices=False)
            return cls(centred, singular**2, rows.T)
        energy, vectors = np.linalg.eigh(centred.T @ centred)
        return cls(centred, energy[::-1].clip(min=0.0), vectors[:, ::-1])

    def whitening(self, variance: float) -> np.ndarray:
        """Maps the centred activations X to the top left-singular vectors of X that explain
        ``variance`` of its squared singular values: X @ W = U_k. From the Gram matrix, so the n
        data points (n·H·W for conv layers) never form an n×k matrix."""
        if self.energy.sum() <= 0:
            return self.vectors[:, :0]
        share = np.cumsum(self.energy) / self.energy.sum()
        keep = int(np.searchsorted(share, variance - 1e-12) + 1)
        return self.vectors[:, :keep] / np.sqrt(self.energy[:keep])


def svcca(a: np.ndarray, b: np.ndarray, variance: float) -> float:
    """Mean canonical correlation between the SVD-reduced activations ``a`` and ``b`` (rows: the
    same data points). 1 for a layer compared with itself; near 0 for unrelated activations."""
    return svcca_at(a, b, (variance,))[0]


def svcca_at(a: np.ndarray, b: np.ndarray, variances: Sequence[float]) -> list[float]:
    """:func:`svcca` at several variance cut-offs, sharing the costly products."""
    # The matrices are small (channels × channels): one BLAS thread is ~100× faster than a pool
    # of threads spinning on a machine whose cores are busy training.
    with threadpool_limits(1, user_api="blas"):
        return _svcca_at(_Reduced.of(a), _Reduced.of(b), variances)


def _svcca_at(a: _Reduced, b: _Reduced, variances: Sequence[float]) -> list[float]:
    """The reduced activations span the columns of U_a and U_b (orthonormal), so their canonical
    correlations are the singular values of U_aᵀU_b = W_aᵀ (AᵀB) W_b."""
    cross = a.centred.T @ b.centred
    means = []
    for variance in variances:
        wa, wb = a.whitening(variance), b.whitening(variance)
        if not wa.shape[1] or not wb.shape[1]:
            means.append(0.0)
            continue
        correlations = np.linalg.svd(wa.T @ cross @ wb, compute_uv=False)
        means.append(float(np.clip(correlations, 0.0, 1.0).mean()))
    return means


def svcca_similarity(
    models: Mapping[str, Sequence[tuple[nn.Module, int | None]]],
    oracle: nn.Module,
    data: TensorSplit,
    engine: Engine,
    variances: tuple[float, float] = (0.5, 0.9),
) -> pd.DataFrame:
    """SVCCA of every model (run at its step) with the oracle, per layer and for the whole model.

    Rows are (label, point, layer, svcca_50, svcca_90) for the paper's Fig. 17 axes (the mean
    correlation keeping 50 % and 90 % of the variance).
    """
    with threadpool_limits(1, user_api="blas"):  # see svcca_at
        reference = {
            layer: _Reduced.of(acts)
            for layer, acts in layer_activations(oracle, data, engine, None).items()
        }  # the oracle's side once, not once per model and cut-off
    rows = []
    for label, trajectory in models.items():
        for point, (model, step) in enumerate(trajectory):
            for layer, acts in layer_activations(model, data, engine, step).items():
                if layer not in reference or acts.shape[0] != reference[layer].centred.shape[0]:
                    continue
                with threadpool_limits(1, user_api="blas"):
                    low, high = _svcca_at(_Reduced.of(acts), reference[layer], variances)
                rows.append(
                    {"label": label, "point": point, "layer": layer, "svcca_50": low,
                     "svcca_90": high}
                )  # fmt: skip
    return pd.DataFrame(rows, columns=["label", "point", "layer", "svcca_50", "svcca_90"])
