"""K trials trained as one stacked model against the same K trials trained one after another.

Both sides do the same work: K models of one architecture, each with its own learning rate and
seed, each trained for the same epochs on the same images with a validation pass before training
and after every epoch (patience off, so none stops early), through the library's own
:func:`~seq2final.training.loop.fit` (sequential) and :func:`~seq2final.training.fused.fit_fused`
(fused). Throughput is model-images/s: K × training images × epochs / seconds. The two sides
alternate over rounds in one process (which goes first alternates too) and the median is kept.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable

import torch
from torch import nn

from seq2final.bench.fit_speed import alternating_medians, synchronize, synthetic_split
from seq2final.models import build_model
from seq2final.training.engine import Engine
from seq2final.training.fused import FusedTrial, fit_fused
from seq2final.training.hyperparameters import HyperParameters
from seq2final.training.loop import fit
from seq2final.training.objectives import Task


def trials_of(width: int) -> list[FusedTrial]:
    """``width`` configurations as a grid gives them: learning rates spread over a decade, the
    paper's dropout 0.5, L2 1e-4, a seed each."""
    return [
        FusedTrial(HyperParameters(lr=1e-3 * 0.1 ** (k / max(1, width)), weight_decay=1e-4,
                                   dropout=0.5), seed=k)
        for k in range(width)
    ]  # fmt: skip


def _models(arch: str, width: int, device: torch.device) -> list[nn.Module]:
    torch.manual_seed(0)
    return [build_model(arch, 10).to(device) for _ in range(width)]


def measure_fused_speed(
    archs: list[str], engine: Engine, widths: list[int], images: int, epochs: int, rounds: int,
    say: Callable[[str], None],
) -> list[dict[str, float | int | str]]:  # fmt: skip
    """Per architecture and width K: model-images/s of K sequential fits and of one fused fit of
    K, and their ratio (above 1: fusing pays)."""
    device = engine.torch_device()
    never_stops = engine.model_copy(update={"patience": epochs + 1})
    task = Task([synthetic_split(images, 0)], synthetic_split(max(1, images // 4), 1))

    def sequential(arch: str, width: int) -> float:
        models, trials = _models(arch, width, device), trials_of(width)
        synchronize(device)
        start = time.perf_counter()
        for model, trial in zip(models, trials, strict=True):
            fit(model, task, trial.hp, never_stops, epochs, trial.seed)
        synchronize(device)
        return time.perf_counter() - start

    def fused(arch: str, width: int) -> float:
        models = _models(arch, width, device)
        synchronize(device)
        start = time.perf_counter()
        fit_fused(models, task, trials_of(width), never_stops, epochs)
        synchronize(device)
        return time.perf_counter() - start

    rows: list[dict[str, float | int | str]] = []
    for arch in archs:
        sides = {"sequential": sequential, "fused": fused}
        for run in sides.values():  # warm-up: allocator, kernels, lazy initialisations
            run(arch, 1)
        for width in widths:
            medians = alternating_medians(
                {name: functools.partial(run, arch, width) for name, run in sides.items()}, rounds
            )
            speed = {name: width * images * epochs / m for name, m in medians.items()}
            ratio = speed["fused"] / speed["sequential"]
            rows.append({"arch": arch, "width": width,
                         "sequential_model_images_per_s": round(speed["sequential"], 1),
                         "fused_model_images_per_s": round(speed["fused"], 1),
                         "ratio": round(ratio, 3)})  # fmt: skip
            say(f"fused vs sequential ratio {arch} K={width}: {ratio:.3f} "
                f"({speed['fused']:.0f} vs {speed['sequential']:.0f} model-images/s)")  # fmt: skip
    return rows
