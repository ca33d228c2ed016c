"""Our single-model fit against a bare PyTorch loop doing the same work.

The bare loop is what a researcher would write for the same fit: Adam, cross entropy plus the L2
term on conv/linear weights, the model's dropout, batches sliced from uint8 tensors moved to the
device once and scaled there under the engine's precision, and a validation pass (loss and
accuracy) before training and after every epoch, as a fit's epoch 0 and epochs are. Our fit also
keeps its training metrics and a copy of the best epoch's weights: that is part of what a fit
is, so it is counted against it. Both train the same architecture on the same images for the same
epochs; they alternate over rounds in one process (which goes first alternates too) and the
median of each is kept, so background load hits both alike.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable, Mapping

import torch
import torch.nn.functional as F

from seq2final.models import build_model, squared_weight_norm
from seq2final.training.engine import Engine, autocast, scale_images
from seq2final.training.hyperparameters import HyperParameters
from seq2final.training.loop import fit
from seq2final.training.objectives import Task
from seq2final.training.tensors import TensorSplit

HP = HyperParameters(lr=1e-3, weight_decay=1e-4, dropout=0.5)


def synthetic_split(images: int, seed: int) -> TensorSplit:
    """Random CIFAR-sized uint8 images and balanced labels (speed does not depend on content)."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (images, 3, 32, 32), dtype=torch.uint8, generator=generator)
    return TensorSplit(x, torch.arange(images) % 10)


def synchronize(device: torch.device) -> None:
    """Wait for the device, so a timer around GPU work measures the work (a no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bare_fit(
    arch: str, train: TensorSplit, valid: TensorSplit, engine: Engine, epochs: int
) -> float:
    """Seconds for ``epochs`` epochs of the bare loop: the data moved to the device, a
    validation pass before training (a fit's epoch 0) and after every epoch, each batch scaled
    and run under the engine's precision as a fit does."""
    device = engine.torch_device()
    torch.manual_seed(0)
    model = build_model(arch, 10, dropout=float(HP.dropout)).to(device)
    if engine.channels_last:
        model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]  # not in torch's stubs
    optimizer = torch.optim.Adam(model.parameters(), lr=HP.lr)
    generator = torch.Generator(device).manual_seed(0)
    synchronize(device)
    start = time.perf_counter()
    x, y = train.x.to(device), train.y.to(device)
    vx, vy = valid.x.to(device), valid.y.to(device)

    def validate() -> tuple[float, float]:
        model.eval()
        with torch.no_grad(), autocast(engine, device):
            logits = torch.cat([
                model(scale_images(vx[i : i + engine.eval_batch_size], engine)).float()
                for i in range(0, len(vy), engine.eval_batch_size)
            ])  # fmt: skip
        loss, accuracy = F.cross_entropy(logits, vy), (logits.argmax(1) == vy).float().mean()
        return tuple(torch.stack([loss, accuracy]).tolist())

    validate()
    for _ in range(epochs):
        model.train()
        order = torch.randperm(len(y), generator=generator, device=device)
        for i in range(0, len(y), engine.batch_size):
            index = order[i : i + engine.batch_size]
            with autocast(engine, device):
                logits = model(scale_images(x[index], engine))
                loss = F.cross_entropy(logits.float(), y[index])
            loss = loss + HP.weight_decay * squared_weight_norm(model)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        validate()
    synchronize(device)
    return time.perf_counter() - start


def our_fit(
    arch: str, train: TensorSplit, valid: TensorSplit, engine: Engine, epochs: int
) -> float:
    """Seconds for ``epochs`` epochs of :func:`seq2final.training.loop.fit` (patience off)."""
    device = engine.torch_device()
    torch.manual_seed(0)
    model = build_model(arch, 10).to(device)
    never_stops = engine.model_copy(update={"patience": epochs + 1})
    synchronize(device)
    start = time.perf_counter()
    fit(model, Task([train], valid), HP, never_stops, epochs, seed=0)
    synchronize(device)
    return time.perf_counter() - start


def alternating_medians(sides: Mapping[str, Callable[[], float]], rounds: int) -> dict[str, float]:
    """Median seconds of each side over ``rounds`` rounds, the sides taking turns to go first
    (background load and warm caches hit both alike)."""
    seconds: dict[str, list[float]] = {name: [] for name in sides}
    for round_number in range(rounds):
        order = list(sides) if round_number % 2 == 0 else list(reversed(list(sides)))
        for name in order:
            seconds[name].append(sides[name]())
    return {name: statistics.median(values) for name, values in seconds.items()}


def compiled_fit(
    arch: str, train: TensorSplit, valid: TensorSplit, engine: Engine, epochs: int
) -> float:
    """:func:`our_fit` with ``training.compile`` on (timed once compiled: the warm-up compiles)."""
    return our_fit(arch, train, valid, engine.model_copy(update={"compile": True}), epochs)


def measure_fit_speed(
    archs: list[str], engine: Engine, images: int, epochs: int, rounds: int,
    say: Callable[[str], None], compiled: bool = True,
) -> list[dict[str, float | str]]:  # fmt: skip
    """Per architecture: images/s of each loop (training images × epochs / seconds, median of
    ``rounds`` alternating rounds after one warm-up of each) and their ratio; with ``compiled``,
    also our fit under ``training.compile`` against it eager."""
    train, valid = synthetic_split(images, 0), synthetic_split(max(1, images // 4), 1)
    rows = []
    for arch in archs:
        loops = {"bare": bare_fit, "ours": our_fit}
        if compiled:
            loops["compiled"] = compiled_fit
        for run in loops.values():  # warm-up: allocator, kernels, lazy initialisations
            run(arch, train, valid, engine, 1)
        medians = alternating_medians(
            {name: functools.partial(run, arch, train, valid, engine, epochs)
             for name, run in loops.items()},
            rounds,
        )  # fmt: skip
        speed = {name: images * epochs / median for name, median in medians.items()}
        ratio = speed["ours"] / speed["bare"]
        row: dict[str, float | str] = {"arch": arch, "bare_images_per_s": round(speed["bare"], 1),
               "fit_images_per_s": round(speed["ours"], 1), "ratio": round(ratio, 3)}  # fmt: skip
        say(f"fit vs same-work bare loop ratio {arch}: {ratio:.3f} "
            f"({speed['ours']:.0f} vs {speed['bare']:.0f} images/s)")  # fmt: skip
        if compiled:
            compile_ratio = speed["compiled"] / speed["ours"]
            row |= {"compiled_images_per_s": round(speed["compiled"], 1),
                    "compile_ratio": round(compile_ratio, 3)}  # fmt: skip
            say(f"compiled fit vs eager fit ratio {arch}: {compile_ratio:.3f} "
                f"({speed['compiled']:.0f} vs {speed['ours']:.0f} images/s)")  # fmt: skip
        rows.append(row)
    return rows
