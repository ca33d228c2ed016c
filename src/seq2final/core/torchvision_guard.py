"""Make ``import torchvision`` work next to a CPU-only torch build.

The pinned torchvision wheel is compiled against a CUDA torch. Next to the CPU torch its native
extension fails to load, and torchvision's meta registrations then raise
``operator torchvision::nms does not exist`` at import. When (and only when) the native library
cannot be loaded, we define the ``nms``/``qnms`` op schemas with :mod:`torch.library` and give them
a pure-torch CPU kernel, so the rest of torchvision (transforms, models, datasets) imports and runs.
Where the native ops load (a matching CUDA build), this module does nothing.
"""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path

import torch

logger = logging.getLogger(__name__)

_LIBRARY: torch.library.Library | None = None


def _native_ops_load() -> bool:
    spec = importlib.util.find_spec("torchvision")
    if spec is None or spec.origin is None:
        return True  # nothing to guard
    libs = sorted(Path(spec.origin).parent.glob("_C*.so")) + sorted(
        Path(spec.origin).parent.glob("_C*.pyd")
    )
    if not libs:
        return False
    try:
        torch.ops.load_library(str(libs[0]))
    except (OSError, RuntimeError):
        return False
    return True


def _nms_cpu(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    """Greedy non-maximum suppression, the semantics of ``torchvision.ops.nms``."""
    order = scores.argsort(descending=True)
    keep: list[int] = []
    suppressed = torch.zeros(len(order), dtype=torch.bool)
    x1, y1, x2, y2 = boxes.unbind(1)
    areas = (x2 - x1) * (y2 - y1)
    for rank, i in enumerate(order.tolist()):
        if suppressed[rank]:
            continue
        keep.append(i)
        rest = order[rank + 1 :]
        w = (torch.minimum(x2[i], x2[rest]) - torch.maximum(x1[i], x1[rest])).clamp(min=0)
        h = (torch.minimum(y2[i], y2[rest]) - torch.maximum(y1[i], y1[rest])).clamp(min=0)
        inter = w * h
        iou = inter / (areas[i] + areas[rest] - inter)
        suppressed[rank + 1 :] |= iou > iou_threshold
    return torch.tensor(keep, dtype=torch.int64)


def install() -> None:
    """Define the missing op schemas if (and only if) torchvision's native library cannot load."""
    global _LIBRARY
    if _LIBRARY is not None or _native_ops_load():
        return
    logger.debug("torchvision native ops unavailable; registering pure-torch nms")
    _LIBRARY = torch.library.Library("torchvision", "DEF")
    _LIBRARY.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    _LIBRARY.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    _LIBRARY.impl("nms", _nms_cpu, "CPU")
    _LIBRARY.impl("qnms", _nms_cpu, "CPU")


install()
