"""Where models lie in weight space: the projection plane of Appendix G.2, per layer."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from torch import nn

from seq2final.models import layer_names

WHOLE_MODEL = "model"


def layer_weights(model: nn.Module) -> dict[str, np.ndarray]:
    """Each named layer's learned parameters as one flat vector, plus the whole model's.

    Parameters only: BN running statistics are estimates of the data, not learned weights.
    """
    vectors = {
        name: np.concatenate(
            [p.detach().cpu().double().numpy().ravel() for p in getattr(model, name).parameters()]
        )
        for name in layer_names(model)
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
