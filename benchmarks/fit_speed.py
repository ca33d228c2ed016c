"""Training throughput of the project's fit loop, as ratios to a bare PyTorch loop, in one run.

For one architecture and device: images/s of a bare loop (Adam, cross-entropy, float tensors
already in memory, no validation) and of :func:`seq2final.training.loop.fit` for one epoch with its
validation pass, L2 penalty and dropout, under each engine option (default, channels_last, bf16
autocast, and fp16 on CUDA). Options alternate over ``--repeats`` rounds and the median is kept,
so background load hits every variant alike; the ratios are what to compare across machines.

    .venv/bin/python benchmarks/fit_speed.py --arch convnet_4 --images 2000 --repeats 3
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from seq2final.models import build_model
from seq2final.training import Engine, HyperParameters, Task, TensorSplit, fit


def _bare(arch: str, data: TensorSplit, batch: int, device: torch.device) -> float:
    model = build_model(arch, 10).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = data.x.to(device).float() / 255
    y = data.y.to(device)
    model.train()
    start = time.perf_counter()
    for i in range(0, len(y), batch):
        loss = F.cross_entropy(model(x[i : i + batch]), y[i : i + batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return len(y) / (time.perf_counter() - start)


def _ours(arch: str, data: TensorSplit, valid: TensorSplit, engine: Engine) -> float:
    device = engine.torch_device()
    model = build_model(arch, 10).to(device)
    if engine.channels_last:
        model = model.to(memory_format=torch.channels_last)
    hp = HyperParameters(lr=1e-3, weight_decay=1e-4, dropout=0.5)
    start = time.perf_counter()
    fit(model, Task([data], valid), hp, engine, max_epochs=1, seed=0)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return len(data) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="convnet_4")
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="auto")
    args = parser.parse_args()
    g = torch.Generator().manual_seed(0)
    data = TensorSplit(
        torch.randint(0, 256, (args.images, 3, 32, 32), dtype=torch.uint8, generator=g),
        torch.arange(args.images) % 10,
    )
    valid = TensorSplit(data.x[: args.images // 4], data.y[: args.images // 4])
    base = Engine(device=args.device)
    device = base.torch_device()
    variants = {
        "fit (default)": base,
        "fit channels_last": Engine(device=args.device, channels_last=True),
        "fit bf16": Engine(device=args.device, amp="bf16"),
    }
    if device.type == "cuda":
        variants["fit fp16"] = Engine(device=args.device, amp="fp16")
    speeds: dict[str, list[float]] = {"bare loop": [], **{name: [] for name in variants}}
    _bare(args.arch, data, base.batch_size, device)  # warm-up
    for _ in range(args.repeats):
        speeds["bare loop"].append(_bare(args.arch, data, base.batch_size, device))
        for name, engine in variants.items():
            speeds[name].append(_ours(args.arch, data, valid, engine))
    reference = statistics.median(speeds["bare loop"])
    print(
        f"{args.arch} on {device}, {args.images} training images (+{len(valid)} validation for fit), median of {args.repeats}"
    )
    print("| loop | images/s | ratio to bare loop |\n|---|---|---|")
    for name, values in speeds.items():
        median = statistics.median(values)
        print(f"| {name} | {median:.0f} | {median / reference:.2f} |")


if __name__ == "__main__":
    main()
