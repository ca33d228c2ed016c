"""What trained models look like at the final step: interpolation paths, weight projections, SVCCA.

Paper §4.1 and Appendix G. Everything here works on a finished job's *path*: the model its final
fit started from (``s = 0``) and the model it ended with (``s = 1``), both evaluated on the final
step's test set:

* fine-tuning-style jobs (FT, LP-FT, I-FT, D-FT, SFT, EWC) start from the historical chain they
  continued (SFT: the chosen schedule) and move every weight;
* side-tuning and joint jobs end with a joint model; their path scales the modules new at the final
  step (:func:`~seq2final.models.scale_side_modules`), so ``s = 0`` is exactly step T−1's model;
* jobs trained from scratch (baseline, ERM, IRM, DRO, oracle) have no path.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch
from threadpoolctl import threadpool_limits
from torch import nn

from seq2final.methods import HistoricalState
from seq2final.models import JointModel, interpolate, scale_side_modules
from seq2final.training import Data, Engine, predict_logits, scale_images


@dataclass
class PathEnds:
    """A job's path: where its final fit started, where it ended, and the step both run at."""

    start: nn.Module
    end: nn.Module
    step: int | None
    scaled_side_modules: bool

    def at(self, s: float) -> nn.Module:
        """The model a fraction ``s`` of the way along the path."""
        if self.scaled_side_modules:
            assert self.step is not None
            return scale_side_modules(self.end, self.step, s)
        return interpolate(self.start, self.end, s)


def path_ends(
    record: Mapping[str, Any], model: nn.Module, state: HistoricalState | None
) -> PathEnds | None:
    """The path of a finished job (see the module's docstring), or ``None`` for scratch jobs."""
    step = record.get("eval_step")
    if isinstance(model, JointModel):
        if step is None or step < 1:
            return None
        return PathEnds(scale_side_modules(model, step, 0.0), model, step, True)
    if state is None:
        return None
    chain = state.chains[record.get("chosen", {}).get("chain", "main")]
    return PathEnds(chain.last, model, None, False)


def path_key(record: Mapping[str, Any], points: int) -> str:
    """Where a job's path sampled at ``points`` points is stored. The digest of the result record
    changes when the job is retrained (``force:true``), so a stale path is never reused."""
    digest = hashlib.sha256(json.dumps(record, sort_keys=True, default=str).encode()).hexdigest()
    return f"{record['job_key']}.p{points}.{digest[:8]}"


def accuracy(model: nn.Module, data: Data, engine: Engine, step: int | None) -> float:
    logits = predict_logits(model, data, engine, step)
    return float((logits.argmax(1) == data.y.cpu()).float().mean())


def interpolation_path(ends: PathEnds, data: Data, engine: Engine, points: int) -> pd.DataFrame:
    """Test accuracy at ``points`` evenly spaced ``s`` from 0 to 1 (paper §4.1 uses 101)."""
    weights = np.linspace(0.0, 1.0, points)
    return pd.DataFrame(
        {
            "s": weights,
            "test_accuracy": [
                accuracy(ends.at(float(s)), data, engine, ends.step) for s in weights
            ],
        }
    )


# --------------------------------------------------------------------------------------------
# Weight projection (Appendix G.2)
# --------------------------------------------------------------------------------------------

WHOLE_MODEL = "model"


def layer_weights(model: nn.Module) -> dict[str, np.ndarray]:
    """Each named layer's learned parameters as one flat vector, plus the whole model's.

    Parameters only: BN running statistics are estimates of the data, not learned weights.
    """
    vectors = {
        name: np.concatenate(
            [p.detach().cpu().double().numpy().ravel() for p in getattr(model, name).parameters()]
        )
        for name in model.layer_names
    }
    vectors[WHOLE_MODEL] = np.concatenate(list(vectors.values()))
    return vectors


def weight_projection(
    models: Mapping[str, Sequence[nn.Module]],
    oracle: nn.Module,
    history: nn.Module,
    final_only: nn.Module,
) -> pd.DataFrame:
    """Coordinates of every model in the plane of Appendix G.2, per layer and for the whole model.

    The origin is the oracle w*; x is the signed length of the projection of w − w* on the
    direction toward ERM on the historical steps (w_H), y on the direction toward the model fit on
    the final step alone (w_T, the baseline). As in the paper the axes are not made orthogonal, so
    each keeps its meaning. ``models`` maps a label to a trajectory (one or more models); rows are
    (label, point, layer, x, y).
    """
    origin, toward_h, toward_t = (layer_weights(m) for m in (oracle, history, final_only))
    rows = []
    for label, trajectory in models.items():
        for point, model in enumerate(trajectory):
            for layer, w in layer_weights(model).items():
                offset = w - origin[layer]
                u = toward_h[layer] - origin[layer]
                v = toward_t[layer] - origin[layer]
                rows.append(
                    {
                        "label": label,
                        "point": point,
                        "layer": layer,
                        "x": float(offset @ u / np.linalg.norm(u)) if u.any() else 0.0,
                        "y": float(offset @ v / np.linalg.norm(v)) if v.any() else 0.0,
                    }
                )
    return pd.DataFrame(rows, columns=["label", "point", "layer", "x", "y"])


# --------------------------------------------------------------------------------------------
# SVCCA (Appendix G.2, Raghu et al. 2017)
# --------------------------------------------------------------------------------------------


@torch.no_grad()
def layer_activations(
    model: nn.Module, data: Data, engine: Engine, step: int | None
) -> dict[str, np.ndarray]:
    """Every named layer's output on ``data`` in eval mode, shaped for SVCCA, plus the whole model.

    A convolutional output N×C×H×W becomes (N·H·W)×C: each position is a data point of the same C
    neurons (Raghu et al.'s treatment of conv layers), which keeps the neurons few and the points
    many. The head's logits (before softmax) are N×classes. The whole model concatenates, per
    image, every conv layer's channels averaged over positions and the logits.
    """
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    x = scale_images(data.x.to(device), engine)
    outputs: dict[str, torch.Tensor] = {}
    try:
        for name in model.layer_names:
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


def _whitening(gram: np.ndarray, variance: float) -> np.ndarray:
    """Maps centred activations X to the top left-singular vectors of X that explain
    ``variance`` of its squared singular values: X @ W = U_k. Computed from the Gram matrix XᵀX,
    so the n data points (n·H·W for conv layers) never form an n×k matrix."""
    energy, vectors = np.linalg.eigh(gram)
    energy, vectors = energy[::-1].clip(min=0.0), vectors[:, ::-1]
    if energy.sum() <= 0:
        return vectors[:, :0]
    keep = int(np.searchsorted(np.cumsum(energy) / energy.sum(), variance - 1e-12) + 1)
    return vectors[:, :keep] / np.sqrt(energy[:keep])


def svcca(a: np.ndarray, b: np.ndarray, variance: float) -> float:
    """Mean canonical correlation between the SVD-reduced activations ``a`` and ``b`` (rows: the
    same data points). 1 for a layer compared with itself; near 0 for unrelated activations."""
    return svcca_at(a, b, (variance,))[0]


def svcca_at(a: np.ndarray, b: np.ndarray, variances: Sequence[float]) -> list[float]:
    """:func:`svcca` at several variance cut-offs, sharing the costly products.

    The reduced activations span the columns of U_a and U_b (orthonormal), so their canonical
    correlations are the singular values of U_aᵀU_b = W_aᵀ (AᵀB) W_b.
    """
    # The matrices are small (channels × channels): one BLAS thread is ~100× faster than a pool
    # of threads spinning on a machine whose cores are busy training.
    with threadpool_limits(1, user_api="blas"):
        a, b = a - a.mean(axis=0), b - b.mean(axis=0)
        gram_a, gram_b, cross = a.T @ a, b.T @ b, a.T @ b
        means = []
        for variance in variances:
            wa, wb = _whitening(gram_a, variance), _whitening(gram_b, variance)
            if not wa.shape[1] or not wb.shape[1]:
                means.append(0.0)
                continue
            correlations = np.linalg.svd(wa.T @ cross @ wb, compute_uv=False)
            means.append(float(np.clip(correlations, 0.0, 1.0).mean()))
        return means


def svcca_similarity(
    models: Mapping[str, Sequence[tuple[nn.Module, int | None]]],
    oracle: nn.Module,
    data: Data,
    engine: Engine,
    variances: tuple[float, float] = (0.5, 0.9),
) -> pd.DataFrame:
    """SVCCA of every model (run at its step) with the oracle, per layer and for the whole model.

    Rows are (label, point, layer, svcca_50, svcca_90) for the paper's Fig. 17 axes (the mean
    correlation keeping 50 % and 90 % of the variance).
    """
    reference = layer_activations(oracle, data, engine, None)
    rows = []
    for label, trajectory in models.items():
        for point, (model, step) in enumerate(trajectory):
            for layer, acts in layer_activations(model, data, engine, step).items():
                if layer not in reference or acts.shape[0] != reference[layer].shape[0]:
                    continue
                low, high = svcca_at(acts, reference[layer], variances)
                rows.append(
                    {"label": label, "point": point, "layer": layer, "svcca_50": low,
                     "svcca_90": high}
                )  # fmt: skip
    return pd.DataFrame(rows, columns=["label", "point", "layer", "svcca_50", "svcca_90"])
