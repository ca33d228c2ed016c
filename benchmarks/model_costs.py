"""Cost table of the model zoo: parameter counts, forward MACs and training throughput.

For every registered architecture: parameters under the paper's convention and in all, forward
multiply-accumulates per 32x32 image (``torch.utils.flop_counter``), and training throughput in
images/s for one forward + backward pass (cross-entropy, no optimiser step) on a batch of random
images, in the default (NCHW) and channels_last memory formats. Each timing is the median of
``--iters`` timed iterations after ``--warmup`` untimed ones. The table goes to stdout as Markdown,
or to ``--output``.

    .venv/bin/python benchmarks/model_costs.py --output /tmp/model_costs.md

Other work on the same cores distorts throughput badly (an OpenMP barrier waits for a descheduled
thread), so the header records the load average before and after the run.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn

from seq2final.models import ARCHITECTURES, build_model, count_parameters, forward_macs


def _cpu_name() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def training_throughput(
    model: nn.Module,
    batch_size: int,
    warmup: int,
    iters: int,
    device: torch.device,
    channels_last: bool,
) -> float:
    """Images per second for forward + backward, from the median iteration time."""
    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    model = model.to(device=device, memory_format=memory_format).train()
    generator = torch.Generator().manual_seed(0)
    x = torch.rand(batch_size, 3, 32, 32, generator=generator)
    x = x.to(device).contiguous(memory_format=memory_format)
    y = torch.randint(0, 10, (batch_size,), generator=generator).to(device)
    times = []
    for step in range(warmup + iters):
        _synchronize(device)
        start = time.perf_counter()
        model.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(model(x), y).backward()
        _synchronize(device)
        if step >= warmup:
            times.append(time.perf_counter() - start)
    return batch_size / statistics.median(times)


def cost_table(
    archs: list[str], batch_size: int, warmup: int, iters: int, device: torch.device
) -> list[str]:
    """One Markdown row per architecture."""
    rows = [
        "| Architecture | Params (paper) | Params (all) | MACs/img (M) | img/s NCHW "
        "| img/s channels_last | channels_last gain |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name in archs:
        model = build_model(name, num_classes=10)
        macs = forward_macs(model) / 1e6
        speeds = [
            training_throughput(
                build_model(name, num_classes=10), batch_size, warmup, iters, device, fmt
            )
            for fmt in (False, True)
        ]
        rows.append(
            f"| {name} | {count_parameters(model, 'paper'):,} | {count_parameters(model, 'all'):,} "
            f"| {macs:.1f} | {speeds[0]:.0f} | {speeds[1]:.0f} | {speeds[1] / speeds[0]:.2f}x |"
        )
        print(f"measured {name}", file=sys.stderr, flush=True)
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, help="write the Markdown here instead of stdout")
    parser.add_argument("--archs", nargs="+", default=list(ARCHITECTURES))
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    rows = cost_table(args.archs, args.batch_size, args.warmup, args.iters, device)
    elapsed = time.perf_counter() - started
    hardware = torch.cuda.get_device_name(device) if device.type == "cuda" else _cpu_name()
    header = [
        f"Device: {hardware} ({device.type}), {os.cpu_count()} CPU cores, "
        f"{args.threads} intra-op threads; torch {torch.__version__}.",
        f"Batch {args.batch_size}, forward + backward (cross-entropy), median of {args.iters} "
        f"iterations after {args.warmup} warm-up; 1-minute load average {load_before:.2f} "
        f"before, {os.getloadavg()[0]:.2f} after; {elapsed:.0f} s in all.",
        "",
    ]
    text = "\n".join(header + rows) + "\n"
    if args.output is None:
        sys.stdout.write(text)
    else:
        args.output.write_text(text)


if __name__ == "__main__":
    main()
